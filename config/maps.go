package config

import (
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// clearWrittenMaps sets to nil every map-valued field of v (a pointer to a
// struct) that doc writes, so that decoding doc onto v gives that field
// exactly the file's entries. yaml.v3 decodes into a map that is already
// set, which would merge the file's map into the default one: a file that
// lists only `extraction` under auth.oauth2.product_scopes would keep the
// default `registry` scope. Fields the file does not mention keep their
// defaults. A document that does not parse is left to the decoder to
// report.
func clearWrittenMaps(v any, doc []byte) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil || root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return
	}
	clearMaps(reflect.ValueOf(v).Elem(), root.Content[0])
}

// clearMaps walks the struct sv along the mapping node n.
func clearMaps(sv reflect.Value, n *yaml.Node) {
	n = resolve(n)
	if sv.Kind() == reflect.Pointer {
		if sv.IsNil() {
			return // decoded fresh: nothing to merge into
		}
		sv = sv.Elem()
	}
	if sv.Kind() != reflect.Struct || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" { // `<<: *anchor` writes the anchor's keys here
			val = resolve(val)
			if val.Kind == yaml.SequenceNode {
				for _, m := range val.Content {
					clearMaps(sv, m)
				}
			} else {
				clearMaps(sv, val)
			}
			continue
		}
		f, ok := fieldByYAMLName(sv, k.Value)
		if !ok {
			continue // an unknown key: the decoder reports it
		}
		if f.Kind() == reflect.Map {
			f.SetZero()
			continue
		}
		clearMaps(f, val)
	}
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// fieldByYAMLName finds the field of the struct sv that yaml.v3 decodes
// the key name into, looking into `,inline` structs as yaml.v3 does.
func fieldByYAMLName(sv reflect.Value, name string) (reflect.Value, bool) {
	t := sv.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		tagName, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") {
			if sf.Type.Kind() == reflect.Struct {
				if f, ok := fieldByYAMLName(sv.Field(i), name); ok {
					return f, true
				}
			}
			continue
		}
		if tagName == "" {
			tagName = strings.ToLower(sf.Name)
		}
		if tagName == name {
			return sv.Field(i), true
		}
	}
	return reflect.Value{}, false
}
