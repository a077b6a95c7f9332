package config

import (
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

var lineErr = regexp.MustCompile(`^line (\d+): (.*)$`)
var notFound = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// explain rewrites yaml.v3's "line N: …" errors so that each names the
// field by its YAML path (server.max_body_bytes), as every other config
// error does.
func explain(doc []byte, err error) string {
	var root yaml.Node
	_ = yaml.Unmarshal(doc, &root)
	var out []string
	for _, l := range strings.Split(strings.TrimPrefix(err.Error(), "yaml: "), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l == "unmarshal errors:" {
			continue
		}
		m := lineErr.FindStringSubmatch(l)
		if m == nil {
			out = append(out, l)
			continue
		}
		line, _ := strconv.Atoi(m[1])
		msg := m[2]
		if nf := notFound.FindStringSubmatch(msg); nf != nil {
			msg = "unknown field " + strconv.Quote(nf[1])
		}
		if p := pathAt(&root, line, ""); p != "" {
			out = append(out, p+": "+msg+" (line "+m[1]+")")
		} else {
			out = append(out, "line "+m[1]+": "+msg)
		}
	}
	return strings.Join(out, "; ")
}

// pathAt finds the dotted path of the mapping key or value on line.
func pathAt(n *yaml.Node, line int, prefix string) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if p := pathAt(c, line, prefix); p != "" {
				return p
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if prefix != "" {
				p = prefix + "." + k.Value
			}
			if k.Line == line {
				if v.Kind != yaml.ScalarNode {
					if q := pathAt(v, line, p); q != "" {
						return q
					}
				}
				return p
			}
			if q := pathAt(v, line, p); q != "" {
				return q
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := prefix + "[" + strconv.Itoa(i) + "]"
			if c.Line == line && c.Kind == yaml.ScalarNode {
				return p
			}
			if q := pathAt(c, line, p); q != "" {
				return q
			}
		}
	}
	return ""
}
