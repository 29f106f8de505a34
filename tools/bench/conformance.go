package bench

import (
	"context"
	"fmt"
)

// CheckSystem checks that sys's sessions keep the Session contract on a
// few keys under prefix (which must be empty), one session after the
// other: versions grow with writes, a stale or absent-key compare is a
// conflict carrying the current version, and a placement of an existing
// task conflicts. After it the counter prefix+"/alloc/m1/cpu" has been
// raised by 2 (two committed placements, each Delta 1): callers may check
// that with their own client. Implementations' tests run it against a
// real store.
func CheckSystem(ctx context.Context, sys System, prefix string) error {
	s0, err := sys.NewSession(ctx, 0)
	if err != nil {
		return err
	}
	defer s0.Close()
	s1, err := sys.NewSession(ctx, 1)
	if err != nil {
		return err
	}
	defer s1.Close()

	k := prefix + "/cas/k"
	v1, err := s0.Put(ctx, k, []byte("a"))
	if err != nil {
		return fmt.Errorf("Put %s: %w", k, err)
	}
	if v1 == 0 {
		return fmt.Errorf("Put %s: version 0", k)
	}
	out, err := s1.CompareAndPut(ctx, k, v1, []byte("b"))
	if err != nil {
		return fmt.Errorf("CompareAndPut %s at its version: %w", k, err)
	}
	if !out.Committed || out.Version <= v1 {
		return fmt.Errorf("CompareAndPut %s at its version %d: %+v, want committed at a later version", k, v1, out)
	}
	v2 := out.Version
	out, err = s0.CompareAndPut(ctx, k, v1, []byte("c"))
	if err != nil {
		return fmt.Errorf("CompareAndPut %s at a stale version: %w", k, err)
	}
	if out.Committed || out.Version != v2 {
		return fmt.Errorf("CompareAndPut %s at stale version %d: %+v, want a conflict carrying version %d", k, v1, out, v2)
	}
	absent := prefix + "/cas/absent"
	out, err = s0.CompareAndPut(ctx, absent, 7, []byte("d"))
	if err != nil {
		return fmt.Errorf("CompareAndPut %s (absent) at version 7: %w", absent, err)
	}
	if out.Committed || out.Version != 0 {
		return fmt.Errorf("CompareAndPut %s (absent) at version 7: %+v, want a conflict carrying version 0", absent, out)
	}
	out, err = s0.CompareAndPut(ctx, absent, 0, []byte("d"))
	if err != nil {
		return fmt.Errorf("CompareAndPut %s (absent) at version 0: %w", absent, err)
	}
	if !out.Committed || out.Version == 0 {
		return fmt.Errorf("CompareAndPut %s (absent) at version 0: %+v, want committed", absent, out)
	}

	place := func(task string) Placement {
		return Placement{
			Task:         prefix + "/tasks/check/j0/" + task,
			TaskValue:    []byte("task"),
			Binding:      prefix + "/bindings/m1/" + task,
			BindingValue: []byte("binding"),
			Counter:      prefix + "/alloc/m1/cpu",
			Delta:        1,
		}
	}
	for i, c := range []struct {
		s         Session
		task      string
		committed bool
	}{
		{s0, "t1", true},
		{s1, "t2", true},  // same counter, other session
		{s1, "t1", false}, // the task exists
	} {
		out, err := c.s.Place(ctx, place(c.task))
		if err != nil {
			return fmt.Errorf("Place #%d (%s): %w", i, c.task, err)
		}
		if out.Committed != c.committed {
			return fmt.Errorf("Place #%d (%s): committed %v, want %v", i, c.task, out.Committed, c.committed)
		}
	}
	return nil
}
