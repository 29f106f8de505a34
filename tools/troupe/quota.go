package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// quotaUsage is what one namespace holds of its quota: its Quota (nil:
// none) and its counters, by band and resource.
type quotaUsage struct {
	namespace string
	quota     *troupev1.Quota
	used      map[string]map[string]int64
}

// quotaRow is one line of a quota table: the use and limit of one
// resource in one band of a namespace.
type quotaRow struct {
	namespace, band, resource string
	used, limit               int64
	limited                   bool
}

// rows are u's lines: every resource its quota limits or its tasks hold,
// production first, by resource name.
func (u quotaUsage) rows() []quotaRow {
	var out []quotaRow
	for _, band := range []string{clientlib.BandProduction, clientlib.BandNonProduction} {
		limits := clientlib.QuotaLimits(u.quota, band)
		resources := map[string]bool{}
		for r := range limits {
			resources[r] = true
		}
		for r, v := range u.used[band] {
			resources[r] = resources[r] || v != 0
		}
		for _, r := range slices.Sorted(maps.Keys(resources)) {
			if !resources[r] {
				continue // nothing held, nothing limited
			}
			limit, limited := limits[r]
			out = append(out, quotaRow{namespace: u.namespace, band: band, resource: r, used: u.used[band][r], limit: limit, limited: limited})
		}
	}
	return out
}

func quotaColumns(withNamespace bool) []column[quotaRow] {
	cols := []column[quotaRow]{
		{header: "BAND", value: func(r quotaRow) string { return r.band }},
		{header: "RESOURCE", value: func(r quotaRow) string { return r.resource }},
		{header: "USED", value: func(r quotaRow) string { return clientlib.FormatQuantity(r.resource, r.used) }},
		{header: "LIMIT", value: func(r quotaRow) string {
			if !r.limited {
				return "-"
			}
			return clientlib.FormatQuantity(r.resource, r.limit)
		}},
		{header: "USE", wide: true, value: func(r quotaRow) string {
			if !r.limited || r.limit == 0 {
				return "-"
			}
			return fmt.Sprintf("%d%%", r.used*100/r.limit)
		}},
	}
	if withNamespace {
		cols = append([]column[quotaRow]{{header: "NAMESPACE", value: func(r quotaRow) string { return r.namespace }}}, cols...)
	}
	return cols
}

// readQuotas reads the Quotas and quota counters of namespaces (none:
// every namespace that has either), by namespace, warning on errOut of
// Quotas that cannot be read.
func readQuotas(ctx context.Context, c *clientlib.Client, errOut io.Writer, namespaces []string) (map[string]*quotaUsage, error) {
	out := map[string]*quotaUsage{}
	usage := func(ns string) *quotaUsage {
		if out[ns] == nil {
			out[ns] = &quotaUsage{namespace: ns, used: map[string]map[string]int64{}}
		}
		return out[ns]
	}
	within := []string{""}
	if len(namespaces) > 0 {
		within = namespaces
	}
	for _, ns := range within {
		var quotas []*troupev1.Quota
		if ns == "" {
			var err error
			if quotas, err = list(ctx, c, clientlib.Quotas, "", errOut); err != nil {
				return nil, err
			}
		} else {
			q, err := clientlib.Get(ctx, c, clientlib.Quotas, clientlib.QuotaKey(ns))
			var bad *clientlib.UnreadableError
			switch {
			case errors.As(err, &bad):
				warnUnreadable(errOut, clientlib.Quotas.Name, bad)
			case err == nil:
				quotas = append(quotas, q)
			case !errors.Is(err, clientlib.ErrNotFound):
				return nil, err
			}
		}
		for _, q := range quotas {
			usage(q.GetMetadata().GetName()).quota = q
		}
		prefix := clientlib.QuotaUsedPrefix
		if ns != "" {
			prefix += ns + "/"
		}
		kvs, _, err := c.List(ctx, prefix)
		if err != nil {
			return nil, fmt.Errorf("list quota counters %s: %w", prefix, err)
		}
		for _, kv := range kvs {
			n, band, resource, ok := clientlib.ParseQuotaUsedKey(kv.GetKey())
			ctr, err := clientlib.DecodeCounter(kv.GetKey(), kv.GetValue(), kv.GetVersion())
			if !ok || err != nil {
				fmt.Fprintf(errOut, "Warning: quota counter %s could not be read (%v); left out\n", kv.GetKey(), err)
				continue
			}
			u := usage(n)
			if u.used[band] == nil {
				u.used[band] = map[string]int64{}
			}
			u.used[band][resource] = ctr.GetValue()
		}
	}
	return out, nil
}

// getQuotas is `troupe get quota [NAMESPACE...]`: the use and limits of
// each namespace's quota (of -n's namespace, or those named), as a table
// of NAMESPACE BAND RESOURCE USED LIMIT (USE with -o wide), or the Quota
// objects with -o yaml or json. -l selects namespaces by their Quota's
// labels.
func (a *app) getQuotas(cmd *cobra.Command, cf *connFlags, o getOptions, ns string, names []string) error {
	if len(names) == 0 && cmd.Flags().Changed("namespace") {
		names = []string{ns}
	}
	c, _, ctx, cancel, err := a.connect(cmd, cf)
	if err != nil {
		return err
	}
	defer cancel()
	defer c.Close()
	all, err := readQuotas(ctx, c, o.errOut, names)
	if err != nil {
		return err
	}
	var (
		shown   []*quotaUsage
		missing []error
	)
	for _, n := range slices.Sorted(maps.Keys(all)) {
		if o.selector.Matches(all[n].quota.GetMetadata().GetLabels()) {
			shown = append(shown, all[n])
		}
	}
	for _, n := range names {
		if all[n] == nil {
			missing = append(missing, errNotFound("quota or quota use of namespace "+n))
		}
	}
	switch o.output {
	case "json", "yaml":
		var quotas []*troupev1.Quota
		for _, u := range shown {
			if u.quota != nil {
				quotas = append(quotas, u.quota)
			}
		}
		if o.output == "json" {
			err = writeJSON(a.out, quotas)
		} else {
			err = writeYAML(a.out, clientlib.Quotas.Name, quotas)
		}
		return errors.Join(append([]error{err}, missing...)...)
	}
	var rows []quotaRow
	for _, u := range shown {
		rows = append(rows, u.rows()...)
	}
	if len(rows) == 0 && len(names) == 0 {
		fmt.Fprintln(a.out, "No quotas found.")
		return nil
	}
	if len(rows) > 0 {
		if err := writeTable(a.out, "", quotaColumns(true), rows, o.output == "wide"); err != nil {
			return err
		}
	}
	return errors.Join(missing...)
}

// describeQuota prints namespace's Quota, what its tasks hold of it, and
// the jobs waiting for it.
func describeQuota(ctx context.Context, c *clientlib.Client, d *describer, namespace string) error {
	all, err := readQuotas(ctx, c, d.errOut, []string{namespace})
	if err != nil {
		return err
	}
	u := all[namespace]
	if u == nil {
		return errNotFound("quota or quota use of namespace " + namespace)
	}
	jobs, err := list(ctx, c, clientlib.Jobs, namespace+"/", d.errOut)
	if err != nil {
		return err
	}
	if u.quota != nil {
		d.meta(u.quota.GetMetadata())
	} else {
		d.field(0, "Name", namespace)
		d.field(0, "Quota", "<none>: nothing is limited; what the tasks hold is counted")
	}
	if rows := u.rows(); len(rows) == 0 {
		d.field(0, "Usage", "<none>")
	} else {
		d.section(0, "Usage")
		if err := table(d, quotaColumns(false), rows, len(rows)); err != nil {
			return err
		}
	}
	waiting := slices.DeleteFunc(jobs, func(j *troupev1.Job) bool { return j.GetStatus().GetAdmission() == "" || clientlib.JobRefused(j) })
	if len(waiting) == 0 {
		d.field(0, "Waiting jobs", "<none>")
		return nil
	}
	slices.SortFunc(waiting, func(a, b *troupev1.Job) int { return cmp.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName()) })
	d.section(0, "Waiting jobs")
	return table(d, []column[*troupev1.Job]{
		{header: "NAME", value: func(j *troupev1.Job) string { return j.GetMetadata().GetName() }},
		{header: "PRIORITY", value: func(j *troupev1.Job) string { return fmt.Sprint(j.GetSpec().GetPriority()) }},
		{header: "ADMISSION", value: func(j *troupev1.Job) string {
			return strings.TrimPrefix(j.GetStatus().GetAdmission(), "namespace "+namespace+" ")
		}},
	}, waiting, describeTasks)
}
