// Package plugins holds Troupe's built-in scheduler plugins, one package
// per plugin (kube-scheduler's layout). Each implements one small
// interface of schedulers/framework:
//
//	filters (framework.FilterPlugin)            Static?
//	  schedulable.Schedulable                    yes   cordoned or lost machines
//	  resourcefit.ResourceFit                    no    requests ≤ free capacity
//	  labelselector.LabelSelector                yes   match_labels, match_expressions
//	  celconstraint.CELConstraint                yes   constraints.cel over `machine`
//	  tainttoleration.TaintToleration            yes   NO_SCHEDULE / NO_EXECUTE taints
//	  distinctmachines.DistinctMachines          no    one task of the job per machine
//
//	scores (framework.ScorePlugin, 0..framework.MaxScore)
//	  binpacking.BinPacking                      fullest machine after placing
//	  spread.LeastAllocated                      emptiest machine after placing
//	  tainttoleration.TaintPreference            fewer untolerated PREFER_NO_SCHEDULE taints
//	  domainspread.DomainSpread                  failure domain with fewest of the job's
//	                                             tasks (needs PreScore, see its package)
//
// Static filters look only at the task's constraints and tolerations and
// at the machine's fixed attributes, so the framework may cache their
// verdict per equivalence class and machine for one decision. Every
// plugin is stateless or guards its state, and is safe for concurrent use.
package plugins
