package keystore

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The keystore file's format (YAML: a version, the records, the
// consumers), shared by the file store's read side (file.go) and its
// write side (file_admin.go).

// FileVersion is the only keystore file format version.
const FileVersion = 1

// fileDoc is the keystore file: YAML with a version and the records.
type fileDoc struct {
	Version   int        `yaml:"version"`
	Keys      []Record   `yaml:"keys"`
	Consumers []Consumer `yaml:"consumers,omitempty"`
	// AdminTokens are the admin API's tokens (hashed); see admintoken.go.
	AdminTokens []AdminToken `yaml:"admin_tokens,omitempty"`
}

const fileComment = "keygate keystore: SHA-256 hashes of API keys, never the keys.\n" +
	"Change it with `keygate keys issue|revoke|rotate`; running gateways reload it."

// ParseFile parses and validates the bytes of a keystore file. An empty
// (or whitespace-only) file is an empty keystore. Unknown fields are errors,
// so that a misspelt expires_at cannot make a key live forever. Contexts
// are returned in lower case.
func ParseFile(data []byte) ([]Record, error) {
	doc, err := parseDoc(data)
	return doc.Keys, err
}

// parseDoc parses and validates the keys and consumers of a keystore file.
func parseDoc(data []byte) (fileDoc, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return fileDoc{}, nil
	}
	var keys []Record
	doc, err := scanDoc(bytes.NewReader(data), func(r Record) error {
		keys = append(keys, r)
		return nil
	})
	switch {
	case errors.Is(err, errNotCanonical):
		return parseDocYAML(data)
	case err != nil:
		return fileDoc{}, err
	}
	doc.Keys = keys
	return validateDoc(doc)
}

// parseDocYAML is parseDoc by yaml.v3 alone.
func parseDocYAML(data []byte) (fileDoc, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var doc fileDoc
	if err := dec.Decode(&doc); err != nil {
		return fileDoc{}, fmt.Errorf("keystore file: %w", err)
	}
	if doc.Version != FileVersion {
		return fileDoc{}, fmt.Errorf("keystore file: version: must be %d, got %d", FileVersion, doc.Version)
	}
	for i := range doc.Keys {
		doc.Keys[i].Context = strings.ToLower(doc.Keys[i].Context)
	}
	return validateDoc(doc)
}

// validateDoc checks the records, consumers and admin tokens of doc.
func validateDoc(doc fileDoc) (fileDoc, error) {
	if err := ValidateRecords(doc.Keys); err != nil {
		return fileDoc{}, fmt.Errorf("keystore file: %w", err)
	}
	if err := ValidateConsumers(doc.Consumers); err != nil {
		return fileDoc{}, fmt.Errorf("keystore file: %w", err)
	}
	if err := validateAdminTokens(doc.AdminTokens); err != nil {
		return fileDoc{}, fmt.Errorf("keystore file: %w", err)
	}
	return doc, nil
}

// MarshalFile returns the bytes of a keystore file holding recs.
func MarshalFile(recs []Record) ([]byte, error) {
	return marshalDoc(fileDoc{Keys: recs})
}

// marshalDoc returns the bytes of a keystore file holding doc. Records
// whose values are all plain are written line by line (yaml.v3 needs
// gigabytes to encode a million records as one document); any other
// record, and the consumers and admin tokens, are encoded by yaml.v3.
// file_scan.go reads the same layout back.
func marshalDoc(doc fileDoc) ([]byte, error) {
	var buf bytes.Buffer
	for _, l := range strings.Split(fileComment, "\n") {
		buf.WriteString("# " + l + "\n")
	}
	fmt.Fprintf(&buf, "version: %d\n", FileVersion)
	if len(doc.Keys) == 0 {
		buf.WriteString("keys: []\n")
	} else {
		buf.WriteString("keys:\n")
	}
	for _, r := range doc.Keys {
		if !writeRecord(&buf, r) {
			b, err := encodeYAML(r)
			if err != nil {
				return nil, err
			}
			for i, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
				if i == 0 {
					buf.WriteString("  - " + l + "\n")
				} else {
					buf.WriteString("    " + l + "\n")
				}
			}
		}
	}
	if len(doc.Consumers) > 0 || len(doc.AdminTokens) > 0 {
		b, err := encodeYAML(struct {
			Consumers   []Consumer   `yaml:"consumers,omitempty"`
			AdminTokens []AdminToken `yaml:"admin_tokens,omitempty"`
		}{doc.Consumers, doc.AdminTokens})
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

func encodeYAML(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("keystore file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("keystore file: %w", err)
	}
	return buf.Bytes(), nil
}

// writeRecord writes r line by line if every value is a plain scalar
// that reads back as written, and reports whether it did.
func writeRecord(buf *bytes.Buffer, r Record) bool {
	if r.Override != nil || len(r.Permissions) > 0 || len(r.AllowedCIDRs) > 0 || r.Leak != nil {
		return false
	}
	type field struct{ name, value string }
	fs := []field{{"id", r.ID}, {"name", r.Name}, {"hash", r.Hash.String()}, {"product", string(r.Product)},
		{"env", string(r.Env)}, {"context", r.Context}, {"created_at", r.CreatedAt.Format(time.RFC3339Nano)}}
	if !r.ExpiresAt.IsZero() {
		fs = append(fs, field{"expires_at", r.ExpiresAt.Format(time.RFC3339Nano)})
	}
	fs = append(fs, field{"status", string(r.Status)})
	if !r.RevokedAt.IsZero() {
		fs = append(fs, field{"revoked_at", r.RevokedAt.Format(time.RFC3339Nano)})
	}
	fs = append(fs, field{"replaced_by", r.ReplacedBy}, field{"consumer", r.Consumer}, field{"plan", r.Plan})
	for _, f := range fs {
		omit := f.value == "" && (f.name == "name" || f.name == "context" || f.name == "replaced_by" || f.name == "consumer" || f.name == "plan")
		if !omit && (!plainValue([]byte(f.value)) || strings.TrimSpace(f.value) != f.value || !yamlPrintable([]byte(f.value))) {
			return false
		}
	}
	first := true
	for _, f := range fs {
		if f.value == "" {
			continue
		}
		if first {
			buf.WriteString("  - ")
			first = false
		} else {
			buf.WriteString("    ")
		}
		buf.WriteString(f.name + ": " + f.value + "\n")
	}
	return true
}

// ErrKeystoreVanished is wrapped by the reload error of a keystore file
// that turned missing or empty after keys were served.
var ErrKeystoreVanished = errors.New("keystore file vanished")

// readFile reads and parses the keystore at path; an absent file is an
// empty keystore.
func readFile(path string) ([]Record, error) {
	doc, err := readDoc(path)
	return doc.Keys, err
}

// readDoc reads and parses the keystore at path with its consumers.
func readDoc(path string) (fileDoc, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileDoc{}, nil
	}
	if err != nil {
		return fileDoc{}, fmt.Errorf("keystore file: %w", err)
	}
	doc, err := parseDoc(data)
	if err != nil {
		return fileDoc{}, fmt.Errorf("%s: %w", path, err)
	}
	return doc, nil
}
