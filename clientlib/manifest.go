package clientlib

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// APIVersion is the apiVersion of Troupe manifests.
const APIVersion = "troupe/v1"

// Manifest is one document of a manifest file, decoded.
type Manifest struct {
	Kind   string
	Object Object
	// File is the file the document is in, when the decoder was told
	// (DecodeManifestFile).
	File string
	// Line is where the object's document starts in the file.
	Line int
	// Err is what is wrong with the document (a *ManifestError), when
	// anything is: Object then holds what of it decoded (nil when nothing
	// did, and Kind is empty when the document names no kind the decoder
	// knows).
	Err error
	// doc is the document's mapping, to find the lines of fields.
	doc *yaml.Node
}

// A Problem is one thing wrong with a manifest: a FieldError (a field
// the kind does not have, a value of the wrong type, a broken validation
// rule) on its line of the file (0 when it is not known).
type Problem struct {
	Line int
	FieldError
}

// ManifestError is what is wrong with one document of a manifest file:
// every problem found in it, each on its line. Those from validating
// its object (Manifest.Check, Manifest.Locate) keep the
// *ValidationError they come from (errors.As finds it), and
// errors.Is(err, ErrInvalid) holds for every ManifestError.
type ManifestError struct {
	File string // when the decoder was told (DecodeManifestFile)
	Line int    // where the document starts (for YAML that does not parse, where the parser gave up)
	// Kind and Name (<namespace>/<name> when namespaced) are the object's,
	// when the document says them.
	Kind, Name string
	Problems   []Problem
	err        error // the *ValidationError of some of the problems, if any
}

// Error writes the one problem on one line, "FILE:LINE: invalid KIND
// "NAME": FIELD: MESSAGE (RULE)"; several problems under a line that
// counts them, one a line.
func (e *ManifestError) Error() string {
	what := "invalid manifest"
	if e.Kind != "" {
		what = "invalid " + e.Kind
		if e.Name != "" {
			what += fmt.Sprintf(" %q", e.Name)
		}
	}
	// A message of several lines (a CEL compiler's) is indented under
	// its first.
	text := func(p Problem) string { return strings.ReplaceAll(p.String(), "\n", "\n    ") }
	if len(e.Problems) == 1 {
		return e.at(e.Problems[0].Line) + what + ": " + text(e.Problems[0])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s%s: %d problems:", e.at(e.Line), what, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + e.at(p.Line) + text(p))
	}
	return b.String()
}

// at writes where line is: "FILE:LINE: ", or "line LINE: " without a
// file.
func (e *ManifestError) at(line int) string {
	switch {
	case e.File != "" && line > 0:
		return fmt.Sprintf("%s:%d: ", e.File, line)
	case e.File != "":
		return e.File + ": "
	case line > 0:
		return fmt.Sprintf("line %d: ", line)
	}
	return ""
}

// Unwrap returns the *ValidationError some of the problems come from,
// or nil.
func (e *ManifestError) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ManifestError) Is(target error) bool { return target == ErrInvalid }

// manifestKinds makes an empty object of each kind by name.
var manifestKinds = map[string]func() Object{
	Machines.Name:           func() Object { return Machines.New() },
	Leases.Name:             func() Object { return Leases.New() },
	Jobs.Name:               func() Object { return Jobs.New() },
	Tasks.Name:              func() Object { return Tasks.New() },
	Bindings.Name:           func() Object { return Bindings.New() },
	Runs.Name:               func() Object { return Runs.New() },
	Schedulers.Name:         func() Object { return Schedulers.New() },
	ValidationPolicies.Name: func() Object { return ValidationPolicies.New() },
	RunAsPolicies.Name:      func() Object { return RunAsPolicies.New() },
	Quotas.Name:             func() Object { return Quotas.New() },
}

// DecodeManifests decodes the YAML (or JSON) documents of a manifest file:
// each has apiVersion "troupe/v1", a kind, metadata, and the kind's other
// fields (spec, ...) named as in the protobuf JSON mapping (or the
// protobuf field names). It is DecodeManifestFile without a file name.
func DecodeManifests(data []byte) ([]Manifest, error) { return DecodeManifestFile("", data) }

// DecodeManifestFile decodes the documents of the manifest file named
// file (the name goes in errors). It finds every problem of each
// document, each with its line: fields its kind does not have, values of
// the wrong type (a count that is not an integer, a duration that is not
// "30s"), a wrong apiVersion or kind, no metadata. A document with
// problems is returned all the same, with its Err set and its Object
// holding what of it is right (which Manifest.Check validates too); the
// error then joins their Errs. YAML that does not parse ends the file:
// the documents before it are returned, and one with the parser's
// error.
func DecodeManifestFile(file string, data []byte) ([]Manifest, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []Manifest
	var errs []error
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		var m Manifest
		switch {
		case err != nil:
			line, msg := yamlError(err)
			m = Manifest{File: file, Line: line, Err: &ManifestError{File: file, Line: line,
				Problems: []Problem{{Line: line, FieldError: FieldError{Rule: "yaml", Message: msg}}}}}
		case len(doc.Content) == 0 || (doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].ShortTag() == "!!null"):
			continue // empty document
		default:
			m = decodeDocument(file, doc.Content[0])
		}
		out = append(out, m)
		if m.Err != nil {
			errs = append(errs, m.Err)
		}
		if err != nil {
			break
		}
	}
	return out, errors.Join(errs...)
}

// yamlErrorLine is how the YAML parser says where it gave up.
var yamlErrorLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// yamlError returns the line and message of a YAML parser error.
func yamlError(err error) (int, string) {
	if m := yamlErrorLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return line, strings.TrimPrefix(err.Error(), m[0])
	}
	return 0, strings.TrimPrefix(err.Error(), "yaml: ")
}

func decodeDocument(file string, n *yaml.Node) Manifest {
	s := &schema{}
	kind, obj := s.document(n)
	m := Manifest{Kind: kind, Object: obj, File: file, Line: n.Line, doc: n}
	if len(s.problems) > 0 {
		m.Err = &ManifestError{File: file, Line: n.Line, Kind: kind, Name: manifestName(obj), Problems: s.problems}
	}
	return m
}

// manifestName is objectName, "" without an object.
func manifestName(obj Object) string {
	if obj == nil {
		return ""
	}
	return objectName(obj)
}

// schema checks a document against the protobuf message of its kind,
// collecting the problems.
type schema struct{ problems []Problem }

func (s *schema) add(line int, field, rule, format string, args ...any) {
	s.problems = append(s.problems, Problem{Line: line, FieldError: FieldError{Field: field, Rule: rule, Message: fmt.Sprintf(format, args...)}})
}

// document decodes the document n: its kind ("" when it names none the
// decoder knows) and what of its object is right (nil when nothing is).
func (s *schema) document(n *yaml.Node) (string, Object) {
	if n.Kind != yaml.MappingNode {
		s.add(n.Line, "", "manifest", "a manifest is a mapping with apiVersion, kind and metadata")
		return "", nil
	}
	if !s.plain(n, 0) {
		return "", nil
	}
	apiVersion, kind := &yaml.Node{Line: n.Line}, &yaml.Node{Line: n.Line} // the keys' values, and lines
	body := &yaml.Node{Kind: yaml.MappingNode, Line: n.Line, Column: n.Column}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "apiVersion":
			apiVersion = &yaml.Node{Value: v.Value, Line: k.Line}
		case "kind":
			kind = &yaml.Node{Value: v.Value, Line: k.Line}
		default:
			body.Content = append(body.Content, k, v)
		}
	}
	if apiVersion.Value != APIVersion {
		s.add(apiVersion.Line, "apiVersion", "api-version", "want %q, got %q", APIVersion, apiVersion.Value)
	}
	newObj, ok := manifestKinds[kind.Value]
	if !ok {
		s.add(kind.Line, "kind", "known-kind", "unknown kind %q: want one of %s", kind.Value, strings.Join(slices.Sorted(maps.Keys(manifestKinds)), ", "))
		return "", nil
	}
	obj := newObj()
	md := obj.ProtoReflect().Descriptor()
	var v any
	var js []byte
	err := s.message(body, n.Line, md, "").Decode(&v)
	if err == nil {
		js, err = json.Marshal(v)
	}
	if err == nil {
		err = protojson.Unmarshal(js, obj)
	}
	switch {
	case err != nil: // what the checks above do not catch
		s.add(n.Line, "", "decode", "%v", err)
	case obj.GetMetadata() == nil && !covered(s.problems, "metadata"):
		s.add(n.Line, "metadata", "required", "must be set")
	}
	return kind.Value, obj
}

// maxManifestDepth bounds the nesting of a manifest document.
const maxManifestDepth = 64

// plain refuses YAML aliases (a manifest has no use for them, and they can
// make a document refer to itself or expand exponentially) and documents
// nested deeper than maxManifestDepth: nothing of such a document is
// decoded.
func (s *schema) plain(n *yaml.Node, depth int) bool {
	switch {
	case n.Kind == yaml.AliasNode:
		s.add(n.Line, "", "plain-yaml", "YAML aliases are not supported in manifests")
		return false
	case depth > maxManifestDepth:
		s.add(n.Line, "", "plain-yaml", "nested deeper than %d levels", maxManifestDepth)
		return false
	}
	for _, c := range n.Content {
		if !s.plain(c, depth+1) {
			return false
		}
	}
	return true
}

// Messages that the JSON mapping writes as scalars.
var scalarMessages = map[protoreflect.FullName]bool{
	"google.protobuf.Timestamp": true, "google.protobuf.Duration": true,
}

// message checks n, at path (its key on line), as a value of md: a
// problem for each field md does not have and each value of the wrong
// type. It returns n without them, what of it can be decoded (nil when
// n is not a mapping).
func (s *schema) message(n *yaml.Node, line int, md protoreflect.MessageDescriptor, path string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		s.add(line, path, "type", "want a mapping of %s, got %s", md.FullName(), written(n))
		return nil
	}
	out := &yaml.Node{Kind: n.Kind, Tag: n.Tag, Line: n.Line, Column: n.Column}
	fields := md.Fields()
	seen := map[string]int{} // line of each field, by path
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		fd := fields.ByJSONName(k.Value)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(k.Value))
		}
		if fd == nil {
			s.add(k.Line, joinPath(path, k.Value), "unknown-field", "unknown field of %s", md.FullName())
			continue
		}
		p := joinPath(path, string(fd.Name()))
		if s.twice(seen, p, k.Line) {
			continue
		}
		if v = s.field(v, k.Line, md, fd, p); v != nil {
			out.Content = append(out.Content, k, v)
		}
	}
	return out
}

// twice says whether seen has path (a field, or a map's key) already,
// a problem; else it puts it there, on line.
func (s *schema) twice(seen map[string]int, path string, line int) bool {
	if first, ok := seen[path]; ok {
		s.add(line, path, "duplicate", "given twice (first on line %d)", first)
		return true
	}
	seen[path] = line
	return false
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// field checks v, the value of the field fd of md at path (its key on
// line), and returns what of it is right (nil: nothing).
func (s *schema) field(v *yaml.Node, line int, md protoreflect.MessageDescriptor, fd protoreflect.FieldDescriptor, path string) *yaml.Node {
	if v.ShortTag() == "!!null" {
		return v // unset
	}
	// probe decodes one value of fd (x, as the field holds it) as
	// protojson does, alone.
	probe := func(x any) error {
		js, err := json.Marshal(map[string]any{fd.JSONName(): x})
		if err == nil {
			err = protojson.Unmarshal(js, dynamicpb.NewMessage(md))
		}
		return err
	}
	switch {
	case fd.IsMap():
		if v.Kind != yaml.MappingNode {
			s.add(line, path, "type", "want a mapping, got %s", written(v))
			return nil
		}
		out := &yaml.Node{Kind: v.Kind, Tag: v.Tag, Line: v.Line, Column: v.Column}
		seen := map[string]int{}
		for i := 0; i+1 < len(v.Content); i += 2 {
			k := *v.Content[i]
			k.Tag = "!!str" // as JSON has it: a key written 1 is "1"
			if s.twice(seen, path+"["+k.Value+"]", k.Line) {
				continue
			}
			item := s.element(v.Content[i+1], k.Line, path+"["+k.Value+"]", fd.MapValue(), amountHint(fd.MapValue(), k.Value),
				func(x any) error { return probe(map[string]any{k.Value: x}) })
			if item != nil {
				out.Content = append(out.Content, &k, item)
			}
		}
		return out
	case fd.IsList():
		if v.Kind != yaml.SequenceNode {
			s.add(line, path, "type", "want a list, got %s", written(v))
			return nil
		}
		out := &yaml.Node{Kind: v.Kind, Tag: v.Tag, Line: v.Line, Column: v.Column}
		for i, item := range v.Content {
			if item = s.element(item, item.Line, fmt.Sprintf("%s[%d]", path, i), fd, "", func(x any) error { return probe([]any{x}) }); item != nil {
				out.Content = append(out.Content, item)
			}
		}
		return out
	}
	return s.element(v, line, path, fd, "", probe)
}

// element checks v, one value of the kind vd describes at path (on
// line): a message's fields, or that probe decodes a scalar. It returns
// what of v is right (nil: nothing), adding hint to the problem of a
// scalar.
func (s *schema) element(v *yaml.Node, line int, path string, vd protoreflect.FieldDescriptor, hint string, probe func(any) error) *yaml.Node {
	if md := vd.Message(); md != nil && !scalarMessages[md.FullName()] {
		return s.message(v, line, md, path)
	}
	var x any
	if v.Kind == yaml.ScalarNode && v.Decode(&x) == nil && probe(x) == nil {
		return v
	}
	s.add(line, path, "type", "want %s, got %s%s", want(vd), written(v), hint)
	return nil
}

// want says how a scalar value of fd is written.
func want(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Duration":
		return `a duration in seconds, such as "30s" or "0.5s"`
	case fd.Message() != nil:
		return `a time such as "2025-01-02T15:04:05Z"`
	}
	switch fd.Kind() {
	case protoreflect.EnumKind:
		var names []string
		for i, vs := 0, fd.Enum().Values(); i < vs.Len(); i++ {
			if vs.Get(i).Number() != 0 {
				names = append(names, string(vs.Get(i).Name()))
			}
		}
		return "one of " + strings.Join(names, ", ")
	case protoreflect.BoolKind:
		return "true or false"
	case protoreflect.StringKind:
		return "a string"
	case protoreflect.BytesKind:
		return "base64"
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return "a number"
	}
	return "an integer"
}

// amountHint says what unit an amount of resource is in, for the
// problem of one that is not an integer (such as "500m" or "1Gi").
func amountHint(vd protoreflect.FieldDescriptor, resource string) string {
	if vd.Kind() != protoreflect.Int64Kind {
		return ""
	}
	switch resource {
	case "cpu":
		return " (cpu is in millicores: 500 for half a core)"
	case "memory", "ephemeral-storage":
		return " (" + resource + " is in bytes: 1073741824 for 1Gi)"
	}
	return ""
}

// written says what v is, for a problem: a scalar as written (strings
// quoted), or what kind of node it is.
func written(v *yaml.Node) string {
	switch {
	case v.Kind == yaml.MappingNode:
		return "a mapping"
	case v.Kind == yaml.SequenceNode:
		return "a list"
	case v.ShortTag() == "!!str":
		return strconv.Quote(v.Value)
	case v.ShortTag() == "!!null":
		return "null"
	}
	return v.Value
}

// Check returns every problem of m as a *ManifestError, each on its
// line: those the decoder found (m.Err), and those of validating its
// object with its defaults filled in, as a write does (Default, then the
// structural rules of its kind and the CEL rules v enforces; nil v: the
// built-in ones). A validation problem within a field the decoder found
// a problem in is left out (it comes of that one). It returns nil when m
// has no problem.
func (m Manifest) Check(v *Validator) error {
	if m.Object == nil {
		return m.Err
	}
	if v == nil {
		var err error
		if v, err = defaultValidator(); err != nil {
			return err
		}
	}
	obj := proto.Clone(m.Object).(Object)
	Default(obj)
	var decoded []Problem
	var me *ManifestError
	if errors.As(m.Err, &me) {
		decoded = me.Problems
	}
	e := m.invalid(m.Kind, objectName(obj), decoded, v.validate(m.Kind, obj))
	if e == nil {
		return nil
	}
	return e
}

// Locate returns err, from validating or writing m's object, as a
// *ManifestError that puts each field error of its *ValidationError on
// its line (and wraps err); err as it is when it is a *ManifestError
// already, or has no *ValidationError.
func (m Manifest) Locate(err error) error {
	var me *ManifestError
	var ve *ValidationError
	if errors.As(err, &me) || !errors.As(err, &ve) {
		return err
	}
	e := m.invalid(ve.Kind, ve.Object, nil, ve.Errors)
	if e == nil {
		return err
	}
	e.err = err
	return e
}

// invalid returns the ManifestError of m's object (kind, name) with the
// problems decoded and the field errors fes on their lines, but those
// within a field of decoded; nil when that leaves none.
func (m Manifest) invalid(kind, name string, decoded []Problem, fes []FieldError) *ManifestError {
	ps := slices.Clone(decoded)
	var kept []FieldError
	for _, fe := range fes {
		if !covered(decoded, fe.Field) {
			kept = append(kept, fe)
			ps = append(ps, Problem{Line: m.FieldLine(fe.Field), FieldError: fe})
		}
	}
	if len(ps) == 0 {
		return nil
	}
	slices.SortStableFunc(ps, func(a, b Problem) int { return cmp.Or(a.Line-b.Line, strings.Compare(a.Field, b.Field)) })
	e := &ManifestError{File: m.File, Line: m.Line, Kind: kind, Name: name, Problems: ps}
	if len(kept) > 0 {
		e.err = &ValidationError{Kind: kind, Object: name, Errors: kept}
	}
	return e
}

// covered says whether one of ps is about the field at path, or a field
// it is in (a problem of the whole document, without a field, is about
// every field).
func covered(ps []Problem, path string) bool {
	segs := fieldPath(path)
	for _, p := range ps {
		if parent := fieldPath(p.Field); len(parent) <= len(segs) && slices.Equal(parent, segs[:len(parent)]) {
			return true
		}
	}
	return false
}

// FieldLine returns the line of the field at path in m's document: a
// path as FieldError.Field writes it ("spec.template.requests[cpu]",
// "spec.constraints.match_expressions[0].values"), its field names in
// snake_case or camelCase, map keys plain or quoted ("requests['cpu']").
// A field the document does not have (a required one it lacks) is on
// the line of the nearest field it is in that the document has, and the
// whole document on m.Line.
func (m Manifest) FieldLine(path string) int {
	n, line := m.doc, m.Line
	if n == nil {
		return line
	}
	for _, seg := range fieldPath(path) {
		next, at := child(n, seg)
		if next == nil {
			break
		}
		n, line = next, at
	}
	return line
}

// A pathSeg is one step of a field path: a field's name (lower case,
// without '_', so that snake_case and camelCase are one), or a map key
// or list index (key).
type pathSeg struct {
	name string
	key  bool
}

// fieldPath splits a field path into its steps.
func fieldPath(path string) []pathSeg {
	var segs []pathSeg
	for path != "" {
		switch path[0] {
		case '.':
			path = path[1:]
		case '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				end = len(path)
			}
			segs = append(segs, pathSeg{name: strings.Trim(path[1:end], `'"`), key: true})
			path = path[min(end+1, len(path)):]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			segs = append(segs, pathSeg{name: fieldName(path[:end])})
			path = path[end:]
		}
	}
	return segs
}

// fieldName is a field name as pathSeg holds it.
func fieldName(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

// child returns the node at seg in n (nil if n has none) and its line:
// a field's or map entry's is its key's, a list item's its own.
func child(n *yaml.Node, seg pathSeg) (*yaml.Node, int) {
	switch {
	case n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; seg.key && k.Value == seg.name || !seg.key && fieldName(k.Value) == seg.name {
				return n.Content[i+1], k.Line
			}
		}
	case n.Kind == yaml.SequenceNode && seg.key:
		if i, err := strconv.Atoi(seg.name); err == nil && i >= 0 && i < len(n.Content) {
			return n.Content[i], n.Content[i].Line
		}
	}
	return nil, 0
}
