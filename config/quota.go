package config

import (
	"errors"
	"sort"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/policy"
)

// quotaProbe reads only whether each env default and plan writes a
// quota: decoded, `quota: {requests: 0, per: 0s}` is the zero Quota, which
// means "no quota", the same as leaving it out.
type quotaProbe struct {
	RateLimit struct {
		Limits map[string]struct {
			Quota *yaml.Node `yaml:"quota"`
		} `yaml:"limits"`
		Plans map[string]struct {
			Quota *yaml.Node `yaml:"quota"`
		} `yaml:"plans"`
	} `yaml:"ratelimit"`
}

// checkWrittenQuotas refuses a quota that is written but limits nothing
// (requests 0, per 0s, or an empty mapping): leaving quota out is how a
// limit says it has none. The error names the field by its YAML path.
func checkWrittenQuotas(doc []byte, c Config) error {
	var p quotaProbe
	if err := yaml.Unmarshal(doc, &p); err != nil {
		return nil // the decoder has reported it
	}
	check := func(section string, written map[string]bool, quota func(string) (policy.Quota, bool)) error {
		names := make([]string, 0, len(written))
		for n := range written {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			q, ok := quota(n)
			if !ok {
				continue
			}
			var fe *policy.FieldError
			if errors.As(policy.CheckFields(policy.Fields{Quota: &q}), &fe) {
				return fmtField("ratelimit."+section+"."+n+"."+fe.Field, fe.Msg+"; leave quota out for no quota")
			}
		}
		return nil
	}
	written := func(m map[string]bool, n string, node *yaml.Node) {
		if node != nil && node.Tag != "!!null" {
			m[n] = true
		}
	}
	limits, plans := map[string]bool{}, map[string]bool{}
	for n, l := range p.RateLimit.Limits {
		written(limits, n, l.Quota)
	}
	for n, pl := range p.RateLimit.Plans {
		written(plans, n, pl.Quota)
	}
	if err := check("limits", limits, func(n string) (policy.Quota, bool) {
		l, ok := c.RateLimit.Limits[n]
		return l.Quota, ok
	}); err != nil {
		return err
	}
	return check("plans", plans, func(n string) (policy.Quota, bool) {
		pl, ok := c.RateLimit.Plans[n]
		return pl.Quota, ok
	})
}

func fmtField(path, msg string) error { return errors.New(path + ": " + msg) }
