// Package framework is the scheduler's decision core, in the shape of
// kube-scheduler's framework and Omega's schedulers: pure code from a cell
// snapshot and a job's pending tasks to a plan, with no store, clock or
// randomness of its own (the random source is injected), so the same code
// runs in a cell, in a test harness and in the simulator.
//
//	Snapshot (machines, allocations) + tasks ──► Schedule(profile) ──► Plan
//	                                                 │
//	            per equivalence class:  sample machines in random order,
//	            run filters until enough feasible ones are found, score
//	            them, place, assume the placement, next task
//
// Plugins are small interfaces, one per extension point: FilterPlugin
// decides whether a task may run on a machine and says why not with a
// Status that separates Unschedulable (a fact about the cell) from Error
// (something broke); ScorePlugin ranks feasible machines. Plugins whose
// verdict depends only on the task's class and the machine's fixed
// attributes (labels, taints) implement Static, and their result is
// computed once per class and machine.
package framework
