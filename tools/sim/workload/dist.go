package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Dist is a distribution of non-negative numbers in the unit of the
// field it fills (tasks, seconds, cores, GiB, priority). Dist names the
// kind; each kind reads its own fields:
//
//	fixed        value
//	uniform      min, max (inclusive; whole numbers for whole-number fields)
//	exponential  mean, and max as a cap if positive
//	lognormal    median and sigma (of the logarithm), and max as a cap
//	choice       values, and weights (relative; equal if omitted)
//
// A field of whole numbers (tasks, priority) rounds an exponential or
// lognormal draw as Round says: "nearest" (the default), "floor" or
// "ceil" (the Omega lightweight simulator's number of tasks is
// ceil(exponential)); a cap (max) applies before rounding. The other
// kinds give whole numbers already. Other fields take no Round.
type Dist struct {
	Dist    string    `yaml:"dist"`
	Value   float64   `yaml:"value"`
	Min     float64   `yaml:"min"`
	Max     float64   `yaml:"max"`
	Mean    float64   `yaml:"mean"`
	Median  float64   `yaml:"median"`
	Sigma   float64   `yaml:"sigma"`
	Values  []float64 `yaml:"values"`
	Weights []float64 `yaml:"weights"`
	Round   string    `yaml:"round"`
}

// Rounding modes of Dist.Round.
const (
	RoundNearest = "nearest"
	RoundFloor   = "floor"
	RoundCeil    = "ceil"
)

// Check reports what is wrong with d as a distribution of numbers below
// limit, naming the field.
func (d Dist) Check(limit float64) error { return d.validate(false, limit) }

// Draw draws a number from d, which Check accepts.
func (d Dist) Draw(rng *rand.Rand) float64 { return d.sample(rng, false) }

// validate checks d for a field whose values must fit below limit (and
// be whole numbers if whole).
func (d Dist) validate(whole bool, limit float64) error {
	inRange := func(name string, v float64) error {
		switch {
		case !(v >= 0) || v >= limit:
			return fmt.Errorf("%s %v: must be in [0, %.6g)", name, v, limit)
		case whole && v != math.Trunc(v):
			return fmt.Errorf("%s %v: must be a whole number", name, v)
		}
		return nil
	}
	switch d.Round {
	case "", RoundNearest, RoundFloor, RoundCeil:
		if d.Round != "" && !whole {
			return fmt.Errorf("round %q: only fields of whole numbers (tasks, priority) are rounded", d.Round)
		}
	default:
		return fmt.Errorf("round %q is not nearest, floor or ceil", d.Round)
	}
	switch d.Dist {
	case "fixed":
		return inRange("value", d.Value)
	case "uniform":
		if err := errors.Join(inRange("min", d.Min), inRange("max", d.Max)); err != nil {
			return err
		}
		if d.Min > d.Max {
			return fmt.Errorf("uniform: min %v is above max %v", d.Min, d.Max)
		}
	case "exponential", "lognormal":
		param, v := "mean", d.Mean
		if d.Dist == "lognormal" {
			param, v = "median", d.Median
			if !(d.Sigma >= 0) || math.IsInf(d.Sigma, 0) {
				return fmt.Errorf("lognormal: sigma %v: must be a non-negative number", d.Sigma)
			}
		}
		if !(v > 0) || v >= limit {
			return fmt.Errorf("%s: %s %v: must be in (0, %.6g)", d.Dist, param, v, limit)
		}
		if d.Max != 0 {
			return inRange("max", d.Max)
		}
	case "choice":
		if len(d.Values) == 0 {
			return errors.New("choice: values are empty")
		}
		for _, v := range d.Values {
			if err := inRange("value", v); err != nil {
				return err
			}
		}
		if len(d.Weights) == 0 {
			return nil
		}
		if len(d.Weights) != len(d.Values) {
			return fmt.Errorf("choice: %d weights for %d values", len(d.Weights), len(d.Values))
		}
		sum := 0.0
		for _, w := range d.Weights {
			if !(w >= 0) || math.IsInf(w, 0) {
				return fmt.Errorf("choice: weight %v: must be a non-negative number", w)
			}
			sum += w
		}
		if sum == 0 {
			return errors.New("choice: weights sum to 0")
		}
	case "":
		return errors.New("dist is missing (fixed, uniform, exponential, lognormal or choice)")
	default:
		return fmt.Errorf("dist %q is not fixed, uniform, exponential, lognormal or choice", d.Dist)
	}
	return nil
}

// sample draws a number; d must be valid. Whole-number fields round it
// as d.Round says, except uniform, which draws whole numbers itself when
// whole (fixed and choice values are whole then).
func (d Dist) sample(rng *rand.Rand, whole bool) float64 {
	var v float64
	switch d.Dist {
	case "fixed":
		return d.Value
	case "uniform":
		if whole {
			return d.Min + float64(rng.Int64N(int64(d.Max-d.Min)+1))
		}
		return d.Min + (d.Max-d.Min)*rng.Float64()
	case "exponential":
		v = d.Mean * rng.ExpFloat64()
	case "lognormal":
		v = d.Median * math.Exp(d.Sigma*rng.NormFloat64())
	case "choice":
		return d.Values[d.pick(rng)]
	}
	if d.Max > 0 {
		v = min(v, d.Max)
	}
	if whole {
		v = d.round(v)
	}
	return v
}

// round rounds v to a whole number as d.Round says.
func (d Dist) round(v float64) float64 {
	switch d.Round {
	case RoundFloor:
		return math.Floor(v)
	case RoundCeil:
		return math.Ceil(v)
	}
	return math.Round(v)
}

// pick draws an index of d.Values by weight.
func (d Dist) pick(rng *rand.Rand) int {
	if len(d.Weights) == 0 {
		return rng.IntN(len(d.Values))
	}
	sum := 0.0
	for _, w := range d.Weights {
		sum += w
	}
	x := rng.Float64() * sum
	for i, w := range d.Weights {
		if x -= w; x < 0 {
			return i
		}
	}
	// Rounding kept x from going below 0: the last value with a weight.
	i := len(d.Weights) - 1
	for d.Weights[i] == 0 {
		i--
	}
	return i
}
