package clientlib

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// APIVersion is the apiVersion of Troupe manifests.
const APIVersion = "troupe/v1"

// Manifest is one object decoded from a manifest file.
type Manifest struct {
	Kind   string
	Object Object
	// Line is where the object's document starts in the file.
	Line int
}

// ManifestError is a problem in a manifest, with its line when known.
type ManifestError struct {
	Line    int
	Message string
}

func (e *ManifestError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, e.Message)
	}
	return e.Message
}

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
}

// DecodeManifests decodes the YAML (or JSON) documents of a manifest file:
// each has apiVersion "troupe/v1", a kind, metadata, and the kind's other
// fields (spec, ...) named as in the protobuf JSON mapping. Unknown fields
// are errors, with their line.
func DecodeManifests(data []byte) ([]Manifest, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []Manifest
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, &ManifestError{Message: "yaml: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		if len(doc.Content) == 0 || (doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null") {
			continue // empty document
		}
		m, err := decodeDocument(doc.Content[0])
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
}

func decodeDocument(n *yaml.Node) (Manifest, error) {
	if n.Kind != yaml.MappingNode {
		return Manifest{}, &ManifestError{Line: n.Line, Message: "a manifest is a mapping with apiVersion, kind and metadata"}
	}
	var apiVersion, kind string
	body := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "apiVersion":
			apiVersion = v.Value
		case "kind":
			kind = v.Value
		default:
			body.Content = append(body.Content, k, v)
		}
	}
	if apiVersion != APIVersion {
		return Manifest{}, &ManifestError{Line: n.Line, Message: fmt.Sprintf("apiVersion %q: want %q", apiVersion, APIVersion)}
	}
	newObj, ok := manifestKinds[kind]
	if !ok {
		return Manifest{}, &ManifestError{Line: n.Line, Message: fmt.Sprintf("unknown kind %q", kind)}
	}
	if err := plain(body, 0); err != nil {
		return Manifest{}, err
	}
	obj := newObj()
	if err := checkFields(body, obj.ProtoReflect().Descriptor(), ""); err != nil {
		return Manifest{}, err
	}
	var v any
	if err := body.Decode(&v); err != nil {
		return Manifest{}, &ManifestError{Line: n.Line, Message: err.Error()}
	}
	js, err := json.Marshal(v)
	if err != nil {
		return Manifest{}, &ManifestError{Line: n.Line, Message: err.Error()}
	}
	if err := protojson.Unmarshal(js, obj); err != nil {
		return Manifest{}, &ManifestError{Line: n.Line, Message: fmt.Sprintf("%s: %v", kind, err)}
	}
	if obj.GetMetadata() == nil {
		return Manifest{}, &ManifestError{Line: n.Line, Message: kind + ": metadata is required"}
	}
	return Manifest{Kind: kind, Object: obj, Line: n.Line}, nil
}

// maxManifestDepth bounds the nesting of a manifest document.
const maxManifestDepth = 64

// plain refuses YAML aliases (a manifest has no use for them, and they can
// make a document refer to itself or expand exponentially) and documents
// nested deeper than maxManifestDepth.
func plain(n *yaml.Node, depth int) error {
	if n.Kind == yaml.AliasNode {
		return &ManifestError{Line: n.Line, Message: "YAML aliases are not supported in manifests"}
	}
	if depth > maxManifestDepth {
		return &ManifestError{Line: n.Line, Message: fmt.Sprintf("nested deeper than %d levels", maxManifestDepth)}
	}
	for _, c := range n.Content {
		if err := plain(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// Messages that the JSON mapping writes as scalars.
var scalarMessages = map[protoreflect.FullName]bool{
	"google.protobuf.Timestamp": true, "google.protobuf.Duration": true,
}

// checkFields reports the first field of n that md does not have, with
// its line and path, so the error points at the mistake.
func checkFields(n *yaml.Node, md protoreflect.MessageDescriptor, path string) error {
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			return nil
		}
		return &ManifestError{Line: n.Line, Message: fmt.Sprintf("%s: want a mapping for %s", strings.TrimPrefix(path, "."), md.FullName())}
	}
	fields := md.Fields()
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		fd := fields.ByJSONName(k.Value)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(k.Value))
		}
		p := path + "." + k.Value
		if fd == nil {
			return &ManifestError{Line: k.Line, Message: fmt.Sprintf("unknown field %q in %s", strings.TrimPrefix(p, "."), md.FullName())}
		}
		if err := checkValue(v, fd, p); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(v *yaml.Node, fd protoreflect.FieldDescriptor, path string) error {
	switch {
	case fd.IsMap():
		if vd := fd.MapValue(); vd.Message() != nil && !scalarMessages[vd.Message().FullName()] && v.Kind == yaml.MappingNode {
			for i := 1; i < len(v.Content); i += 2 {
				if err := checkFields(v.Content[i], vd.Message(), path+"["+v.Content[i-1].Value+"]"); err != nil {
					return err
				}
			}
		}
	case fd.Message() != nil && !scalarMessages[fd.Message().FullName()]:
		if fd.IsList() && v.Kind == yaml.SequenceNode {
			for i, item := range v.Content {
				if err := checkFields(item, fd.Message(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
			return nil
		}
		return checkFields(v, fd.Message(), path)
	}
	return nil
}
