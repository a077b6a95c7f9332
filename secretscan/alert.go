// Package secretscan answers GitHub's secret-scanning partner alerts: GitHub
// POSTs every keygate key it finds in public as a signed JSON array of
// matches; the Handler verifies the signature (ECDSA P-256 over the raw
// body, with a key from GitHub's published list) before it reads the
// JSON, looks each token up by its hash exactly as a request's key is
// looked up, has each key found revoked, quarantined or only noticed
// (through a Reporter: keyops) and answers with GitHub's feedback, labelling
// each match true_positive or false_positive. Tokens that are not keygate
// keys are neither stored nor logged.
package secretscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Match is one token GitHub found.
type Match struct {
	Token  string `json:"token"`
	Type   string `json:"type"`
	URL    string `json:"url"`
	Source string `json:"source"`
}

// ErrTooManyMatches is wrapped by ParseAlert's error for an alert of more
// than its limit of matches.
var ErrTooManyMatches = errors.New("secretscan: too many matches")

// ParseAlert parses an alert body: a JSON array of at most max matches,
// each an object of the string members token, type, url and source (token
// required). Unknown members are ignored, as GitHub may add some. Errors
// never contain a token.
func ParseAlert(b []byte, max int) ([]Match, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('[') {
		return nil, errors.New("secretscan: alert: body must be a JSON array of matches")
	}
	var ms []Match
	for dec.More() {
		if len(ms) == max {
			return nil, fmt.Errorf("%w: at most %d per alert", ErrTooManyMatches, max)
		}
		var m Match
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("secretscan: alert: match %d is not an object of strings", len(ms))
		}
		if m.Token == "" {
			return nil, fmt.Errorf("secretscan: alert: match %d has no token", len(ms))
		}
		ms = append(ms, m)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim(']') {
		return nil, errors.New("secretscan: alert: body must be a JSON array of matches")
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("secretscan: alert: trailing data after the array")
	}
	return ms, nil
}
