package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/troupe-cluster/troupe/clientlib"
	troupev1 "github.com/troupe-cluster/troupe/proto/troupe/v1"
)

// column is one column of a table of objects of type T.
type column[T any] struct {
	header string
	wide   bool // only with -o wide
	value  func(T) string
}

// writeTable prints objs as a table with the columns (wide ones only if
// wide), aligned like kubectl's, each line indented by indent.
func writeTable[T any](out io.Writer, indent string, cols []column[T], objs []T, wide bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	var shown []column[T]
	for _, c := range cols {
		if wide || !c.wide {
			shown = append(shown, c)
		}
	}
	cells := make([]string, len(shown))
	for i, c := range shown {
		cells[i] = c.header
	}
	fmt.Fprintln(w, indent+strings.Join(cells, "\t"))
	for _, o := range objs {
		for i, c := range shown {
			cells[i] = c.value(o)
		}
		fmt.Fprintln(w, indent+strings.Join(cells, "\t"))
	}
	return w.Flush()
}

// age says how long ago t was, as kubectl does: the two largest units
// while they matter ("45s", "3m12s", "25m", "5h3m", "2d5h", "40d").
func age(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	d := now.Sub(t.AsTime())
	if d < 0 {
		d = 0
	}
	s, m, h := int(d.Seconds()), int(d.Minutes()), int(d.Hours())
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", s)
	case d < 10*time.Minute:
		return fmt.Sprintf("%dm%ds", m, s%60)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", m)
	case d < 8*time.Hour:
		return fmt.Sprintf("%dh%dm", h, m%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", h)
	case d < 8*24*time.Hour:
		return fmt.Sprintf("%dd%dh", h/24, h%24)
	}
	return fmt.Sprintf("%dd", h/24)
}

// timestamp prints a time and how long ago it was.
func timestamp(now time.Time, t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return fmt.Sprintf("%s (%s ago)", t.AsTime().UTC().Format(time.RFC3339), age(now, t))
}

// phase is an enum value without its type prefix ("RUNNING"), "-" when
// unspecified.
func phase(v fmt.Stringer, prefix string) string {
	if s := strings.TrimPrefix(v.String(), prefix); s != "UNSPECIFIED" {
		return s
	}
	return "-"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// labels prints a label map as a sorted "k=v,k=v" ("-" when empty).
func labels(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return dash(strings.Join(parts, ","))
}

// resources prints amounts by resource, sorted, in the units every part
// of Troupe writes them in (clientlib.FormatQuantity):
// "cpu=500m,memory=64Mi".
func resources(r map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r)) {
		parts = append(parts, k+"="+clientlib.FormatQuantity(k, r[k]))
	}
	return dash(strings.Join(parts, ","))
}

// constraints summarizes where a job's tasks may go.
func constraints(c *troupev1.Constraints, tols []*troupev1.Toleration) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c.GetMatchLabels())) {
		parts = append(parts, k+"="+c.GetMatchLabels()[k])
	}
	for _, r := range c.GetMatchExpressions() {
		switch r.GetOperator() {
		case troupev1.LabelOperator_LABEL_OPERATOR_EXISTS:
			parts = append(parts, r.GetKey())
		case troupev1.LabelOperator_LABEL_OPERATOR_DOES_NOT_EXIST:
			parts = append(parts, "!"+r.GetKey())
		default:
			op := strings.ToLower(strings.ReplaceAll(phase(r.GetOperator(), "LABEL_OPERATOR_"), "_", ""))
			parts = append(parts, fmt.Sprintf("%s %s (%s)", r.GetKey(), op, strings.Join(r.GetValues(), ",")))
		}
	}
	if c.GetCel() != "" {
		parts = append(parts, "cel: "+c.GetCel())
	}
	if c.GetDistinctMachines() {
		parts = append(parts, "distinct machines")
	}
	if c.GetSpreadLabel() != "" {
		parts = append(parts, "spread over "+c.GetSpreadLabel())
	}
	for _, t := range tols {
		parts = append(parts, "tolerates "+taint(t.GetKey(), t.GetValue(), t.GetEffect()))
	}
	return dash(strings.Join(parts, "; "))
}

// taint prints a taint (or toleration) as kubectl does: "key=value:NoSchedule".
func taint(key, value string, effect troupev1.TaintEffect) string {
	s := key
	if value != "" {
		s += "=" + value
	}
	if effect != troupev1.TaintEffect_TAINT_EFFECT_UNSPECIFIED {
		var b strings.Builder
		for _, w := range strings.Split(phase(effect, "TAINT_EFFECT_"), "_") {
			b.WriteString(w[:1] + strings.ToLower(w[1:]))
		}
		s += ":" + b.String()
	}
	return s
}

// writeJSON prints objs in the protobuf JSON mapping, one after another.
func writeJSON[T proto.Message](out io.Writer, objs []T) error {
	for _, o := range objs {
		b, err := protojson.MarshalOptions{Multiline: true}.Marshal(o)
		if err != nil {
			return err
		}
		fmt.Fprintln(out, string(b))
	}
	return nil
}

// writeYAML prints objs as manifests of kind, separated by "---", that
// clientlib.DecodeManifests reads back: apiVersion and kind, then the
// object's fields in the protobuf JSON mapping and its order.
func writeYAML[T proto.Message](out io.Writer, kind string, objs []T) error {
	if len(objs) == 0 {
		return nil // no document: the encoder would refuse to close
	}
	enc := yaml.NewEncoder(out)
	enc.SetIndent(2)
	for _, o := range objs {
		js, err := protojson.Marshal(o)
		if err != nil {
			return err
		}
		var doc yaml.Node // JSON is YAML: this keeps the fields' order
		if err := yaml.Unmarshal(js, &doc); err != nil {
			return err
		}
		body := doc.Content[0]
		blockStyle(body)
		str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
		body.Content = append([]*yaml.Node{str("apiVersion"), str(clientlib.APIVersion), str("kind"), str(kind)}, body.Content...)
		if err := enc.Encode(body); err != nil {
			return err
		}
	}
	return enc.Close()
}

// blockStyle drops the JSON styles (flow mappings, quoted strings) so the
// encoder writes plain block YAML, quoting only where it must.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// sortedEvents returns events oldest first, by when they were last seen.
func sortedEvents(es []*troupev1.Event) []*troupev1.Event {
	sort.SliceStable(es, func(i, j int) bool { return es[i].GetLastSeen().AsTime().Before(es[j].GetLastSeen().AsTime()) })
	return es
}

// eventColumns are the columns of an Events table.
func eventColumns(now time.Time) []column[*troupev1.Event] {
	return []column[*troupev1.Event]{
		{header: "TYPE", value: func(e *troupev1.Event) string { return e.GetType() }},
		{header: "REASON", value: func(e *troupev1.Event) string { return e.GetReason() }},
		{header: "AGE", value: func(e *troupev1.Event) string { return age(now, e.GetLastSeen()) }},
		{header: "COUNT", value: func(e *troupev1.Event) string { return fmt.Sprint(e.GetCount()) }},
		{header: "FROM", value: func(e *troupev1.Event) string { return e.GetSource() }},
		{header: "OBJECT", value: func(e *troupev1.Event) string {
			return strings.ToLower(e.GetInvolvedKind()) + "/" + e.GetInvolvedName()
		}},
		{header: "MESSAGE", value: func(e *troupev1.Event) string { return e.GetMessage() }},
	}
}
