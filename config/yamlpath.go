package config

import (
	"bytes"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
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

// emptyYAML reports whether doc holds no YAML document: nothing, only
// whitespace, or only comments.
func emptyYAML(doc []byte) bool {
	if len(bytes.TrimSpace(doc)) == 0 {
		return true
	}
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return false // not empty: Parse reports what is wrong with it
	}
	return root.Kind == 0 || (root.Kind == yaml.DocumentNode && len(root.Content) == 0)
}

// durationLike is the shape of a Go duration ("90s", "1h30m").
var durationLike = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// overflowingDurations names every scalar of doc that is shaped like a
// duration (or a plain integer) but is too large for one, by its YAML path.
// yaml.v3 reports those as a failed conversion of a truncated value, and
// by line only, which names the wrong field when several share a line.
func overflowingDurations(doc []byte) []string {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil
	}
	var out []string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, path+"["+strconv.Itoa(i)+"]")
			}
		case yaml.ScalarNode:
			if msg := overflow(n.Value); msg != "" {
				out = append(out, path+": "+msg+" (line "+strconv.Itoa(n.Line)+")")
			}
		}
	}
	walk(&root, "")
	return out
}

// overflow says why v is too large for a duration, or "" when it is not.
func overflow(v string) string {
	const max = "must be at most 2562047h (about 292 years)"
	if durationLike.MatchString(v) && v != "" {
		if _, err := time.ParseDuration(v); err != nil && strings.Contains(err.Error(), "invalid duration") && tooBig(v) {
			return "duration " + strconv.Quote(v) + " is out of range; durations " + max
		}
		return ""
	}
	if i, ok := new(big.Int).SetString(v, 10); ok && !i.IsInt64() {
		return "number " + strconv.Quote(v) + " is out of range (at most " + strconv.FormatInt(math.MaxInt64, 10) + "; durations " + max + ")"
	}
	return ""
}

var digits = regexp.MustCompile(`[0-9]+`)

// tooBig reports whether the duration-shaped v fails to parse only because
// of its size: with its numbers scaled down it parses.
func tooBig(v string) bool {
	small := digits.ReplaceAllString(v, "1")
	_, err := time.ParseDuration(small)
	return err == nil
}
