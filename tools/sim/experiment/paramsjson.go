package experiment

import (
	"encoding/json"
	"math"
	"time"

	"github.com/troupe-cluster/troupe/schedulers/framework"
)

// paramsJSON is Params as results.json holds them: snake_case, times in
// seconds, commit modes by their framework names (DESIGN.md, Experiments, documents each
// field). A field added to Params must be added here too
// (TestParamsJSONRoundTrip fails otherwise).
type paramsJSON struct {
	BatchSchedulers     int     `json:"batch_schedulers"`
	ServiceSchedulers   int     `json:"service_schedulers"`
	BatchProfile        string  `json:"batch_profile"`
	ServiceProfile      string  `json:"service_profile"`
	BatchTJobSeconds    float64 `json:"batch_tjob_seconds"`
	BatchTTaskSeconds   float64 `json:"batch_ttask_seconds"`
	ServiceTJobSeconds  float64 `json:"service_tjob_seconds"`
	ServiceTTaskSeconds float64 `json:"service_ttask_seconds"`
	// Conflict and Txn are absent when each profile's own apply.
	Conflict              string  `json:"conflict,omitempty"`
	Txn                   string  `json:"txn,omitempty"`
	BatchRateFactor       float64 `json:"batch_rate_factor"`
	MaxAttempts           int     `json:"max_attempts"`
	AbandonAfterDecisions int     `json:"abandon_after_decisions"`
	BackoffSeconds        float64 `json:"backoff_seconds"`
	MaxBackoffSeconds     float64 `json:"max_backoff_seconds"`
	// Policy is the preset that replaced the four knobs above, if any.
	Policy         string  `json:"policy,omitempty"`
	HorizonSeconds float64 `json:"horizon_seconds"`
	MTBFSeconds    float64 `json:"mtbf_seconds"`
	RepairSeconds  float64 `json:"repair_seconds"`
}

// MarshalJSON writes p as results.json holds it.
func (p Params) MarshalJSON() ([]byte, error) {
	j := paramsJSON{BatchSchedulers: p.Batch, ServiceSchedulers: p.Service, BatchProfile: p.BatchProfile, ServiceProfile: p.ServiceProfile,
		BatchTJobSeconds: p.BatchDecision.Job.Seconds(), BatchTTaskSeconds: p.BatchDecision.Task.Seconds(),
		ServiceTJobSeconds: p.ServiceDecision.Job.Seconds(), ServiceTTaskSeconds: p.ServiceDecision.Task.Seconds(),
		BatchRateFactor: p.BatchRate, MaxAttempts: p.MaxAttempts, AbandonAfterDecisions: p.AbandonAfter,
		BackoffSeconds: p.Backoff.Seconds(), MaxBackoffSeconds: p.MaxBackoff.Seconds(), Policy: p.Policy, HorizonSeconds: p.Horizon.Seconds(),
		MTBFSeconds: p.MTBF.Seconds(), RepairSeconds: p.Repair.Seconds()}
	if p.Conflict != nil {
		j.Conflict = p.Conflict.String()
	}
	if p.Txn != nil {
		j.Txn = p.Txn.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads p as MarshalJSON writes it.
func (p *Params) UnmarshalJSON(b []byte) error {
	var j paramsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = Params{Batch: j.BatchSchedulers, Service: j.ServiceSchedulers, BatchProfile: j.BatchProfile, ServiceProfile: j.ServiceProfile,
		BatchDecision:   framework.DecisionTime{Job: seconds(j.BatchTJobSeconds), Task: seconds(j.BatchTTaskSeconds)},
		ServiceDecision: framework.DecisionTime{Job: seconds(j.ServiceTJobSeconds), Task: seconds(j.ServiceTTaskSeconds)},
		BatchRate:       j.BatchRateFactor, MaxAttempts: j.MaxAttempts, AbandonAfter: j.AbandonAfterDecisions,
		Backoff: seconds(j.BackoffSeconds), MaxBackoff: seconds(j.MaxBackoffSeconds), Policy: j.Policy, Horizon: seconds(j.HorizonSeconds),
		MTBF: seconds(j.MTBFSeconds), Repair: seconds(j.RepairSeconds)}
	if j.Conflict != "" {
		m, err := framework.ParseConflictMode(j.Conflict)
		if err != nil {
			return err
		}
		p.Conflict = &m
	}
	if j.Txn != "" {
		m, err := framework.ParseTxnMode(j.Txn)
		if err != nil {
			return err
		}
		p.Txn = &m
	}
	return nil
}

// seconds is s seconds as a duration, to the nanosecond.
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
