package differential

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// expectation says what keygate must do with a corpus body beyond the
// invariant that check applies to every body.
type expectation int

const (
	// either: forwarded or refused, as long as the invariant holds.
	either expectation = iota
	// forward: a well-formed upload that keygate must forward and every
	// parser must read.
	forward
	// refuse: keygate must refuse it.
	refuse
)

// corpusCase is one adversarial body.
type corpusCase struct {
	name string
	ct   string
	body string
	want expectation
}

const bnd = "XyZ12boundary"

// ct is the usual Content-Type for bodies delimited by bnd.
var ct = "multipart/form-data; boundary=" + bnd

// p is one part with raw header lines (each without its CRLF) and a value.
func p(value string, headers ...string) string {
	var b strings.Builder
	b.WriteString("--" + bnd + "\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n" + value + "\r\n")
	return b.String()
}

func field(name, value string) string {
	return p(value, `Content-Disposition: form-data; name="`+name+`"`)
}

func file() string {
	return p("%PDF-1.4 hello", `Content-Disposition: form-data; name="files"; filename="doc.pdf"`, "Content-Type: application/pdf")
}

func id() string { return field("id", "5e0e5f3a-1b2c-4d3e-8f40-5a6b7c8d9e0f") }

const closing = "--" + bnd + "--\r\n"

// smuggle is a body whose first context-ish part (given as raw headers)
// carries otherCtx, followed by a proper contextId carrying boundCtx.
func smuggle(headers ...string) string {
	return file() + id() + p(otherCtx, headers...) + field("contextId", boundCtx) + closing
}

// builtinCorpus is the adversarial corpus: the classes keygate was shown to
// get wrong, and the shapes on which multipart parsers are known to differ.
func builtinCorpus() []corpusCase {
	bigFile := p(strings.Repeat("A", 100<<10), `Content-Disposition: form-data; name="files"; filename="big.pdf"`, "Content-Type: application/pdf")
	lf := strings.ReplaceAll(file()+id()+field("contextId", otherCtx)+closing, "\r\n", "\n")
	return []corpusCase{
		// Well-formed controls: keygate forwards, every parser reads them.
		{"control contextId last", ct, file() + id() + field("contextId", boundCtx) + closing, forward},
		{"control contextId first", ct, field("contextId", boundCtx) + file() + id() + closing, forward},
		{"control contextID spelling", ct, file() + id() + field("contextID", boundCtx) + closing, forward},
		{"control context after 100 KiB file", ct, bigFile + id() + field("contextId", boundCtx) + closing, forward},
		{"control quoted boundary", `multipart/form-data; boundary="` + bnd + `"`, file() + id() + field("contextId", boundCtx) + closing, forward},
		{"control upper-case context value", ct, file() + id() + field("contextId", strings.ToUpper(boundCtx)) + closing, forward},
		{"control both spellings agree", ct, field("contextId", boundCtx) + file() + field("contextID", boundCtx) + closing, forward},

		// Finding 1: dispositions other than form-data.
		{"attachment disposition", ct, smuggle(`Content-Disposition: attachment; name="contextId"`), refuse},
		{"inline disposition", ct, smuggle(`Content-Disposition: inline; name="contextId"`), refuse},
		{"form-data with trailing junk", ct, smuggle(`Content-Disposition: form-data; name="contextId" junk`), refuse},
		{"unknown disposition type", ct, smuggle(`Content-Disposition: x-form; name="contextId"`), refuse},
		{"disposition without type", ct, smuggle(`Content-Disposition: name="contextId"`), refuse},
		{"upper-case disposition type", ct, smuggle(`Content-Disposition: FORM-DATA; name="contextId"`), either},
		{"upper-case header name", ct, smuggle(`CONTENT-DISPOSITION: form-data; name="contextId"`), either},

		// Names: RFC 2231/5987, duplicates, escapes, case, arrays.
		{"rfc2231 name", ct, smuggle(`Content-Disposition: form-data; name*=UTF-8''contextId`), either},
		{"rfc2231 percent-encoded name", ct, smuggle(`Content-Disposition: form-data; name*=UTF-8''%63ontextId`), either},
		{"rfc2231 continuation", ct, smuggle(`Content-Disposition: form-data; name*0="context"; name*1="Id"`), either},
		{"name and name* disagree", ct, smuggle(`Content-Disposition: form-data; name="other"; name*=UTF-8''contextId`), either},
		{"duplicate name, context second", ct, smuggle(`Content-Disposition: form-data; name="x"; name="contextId"`), either},
		{"duplicate name, context first", ct, smuggle(`Content-Disposition: form-data; name="contextId"; name="x"`), either},
		{"unquoted name", ct, smuggle(`Content-Disposition: form-data; name=contextId`), either},
		{"single-quoted name", ct, smuggle(`Content-Disposition: form-data; name='contextId'`), either},
		{"backslash in name", ct, smuggle(`Content-Disposition: form-data; name="context\Id"`), either},
		{"percent in name", ct, smuggle(`Content-Disposition: form-data; name="context%49d"`), either},
		{"lower-case name", ct, smuggle(`Content-Disposition: form-data; name="contextid"`), either},
		{"upper-case name", ct, smuggle(`Content-Disposition: form-data; name="CONTEXTID"`), either},
		{"php array name", ct, smuggle(`Content-Disposition: form-data; name="contextId[]"`), either},
		{"php keyed array name", ct, smuggle(`Content-Disposition: form-data; name="contextId[0]"`), either},
		{"name with NUL", ct, smuggle("Content-Disposition: form-data; name=\"contextId\x00\""), either},
		{"name with trailing space", ct, smuggle(`Content-Disposition: form-data; name="contextId "`), either},
		{"space before name parameter value", ct, smuggle(`Content-Disposition: form-data; name = "contextId"`), either},
		{"no space after semicolon", ct, smuggle(`Content-Disposition: form-data;name="contextId"`), either},
		{"context as a file", ct, smuggle(`Content-Disposition: form-data; name="contextId"; filename="ctx.txt"`), either},
		{"filename* on context", ct, smuggle(`Content-Disposition: form-data; name="contextId"; filename*=UTF-8''ctx.txt`), either},

		// Part headers.
		{"two dispositions, context second", ct, smuggle(`Content-Disposition: form-data; name="x"`, `Content-Disposition: form-data; name="contextId"`), refuse},
		{"two dispositions, context first", ct, smuggle(`Content-Disposition: form-data; name="contextId"`, `Content-Disposition: form-data; name="x"`), refuse},
		{"space before colon", ct, smuggle(`Content-Disposition : form-data; name="contextId"`), either},
		{"folded header", ct, smuggle("Content-Disposition: form-data;", ` name="contextId"`), either},
		{"tab-folded header", ct, smuggle("Content-Disposition: form-data;", "\tname=\"contextId\""), either},
		{"header line without colon", ct, smuggle(`Content-Disposition: form-data; name="contextId"`, "garbage"), either},
		{"bare CR in header", ct, smuggle("Content-Disposition: form-data; name=\"x\"\rContent-Disposition: form-data; name=\"contextId\""), either},
		{"base64 context", ct, file() + id() + p("OTk5OTk5OTktODg4OC00Nzc3LTg2NjYtNTU1NTU1NTU1NTU1", `Content-Disposition: form-data; name="contextId"`, "Content-Transfer-Encoding: base64") + closing, refuse},
		{"quoted-printable context", ct, file() + id() + p("=39"+otherCtx[1:], `Content-Disposition: form-data; name="contextId"`, "Content-Transfer-Encoding: quoted-printable") + closing, refuse},
		{"quoted-printable bound context", ct, file() + id() + p(boundCtx, `Content-Disposition: form-data; name="contextId"`, "Content-Transfer-Encoding: quoted-printable") + closing, refuse},
		{"utf-16 context", ct, file() + id() + p(utf16(otherCtx), `Content-Disposition: form-data; name="contextId"`, "Content-Type: text/plain; charset=utf-16") + closing, either},
		{"_charset_ field", ct, field("_charset_", "utf-16") + file() + id() + field("contextId", boundCtx) + closing, either},
		{"context part type json", ct, file() + id() + p(`"`+otherCtx+`"`, `Content-Disposition: form-data; name="contextId"`, "Content-Type: application/json") + closing, either},
		{"part without headers", ct, file() + p("Content-Disposition: form-data; name=\"contextId\"\r\n\r\n"+otherCtx) + field("contextId", boundCtx) + closing, either},
		{"part without disposition", ct, file() + p(otherCtx, "Content-Type: text/plain") + field("contextId", boundCtx) + closing, either},

		// Values.
		{"context with trailing CRLF", ct, file() + id() + field("contextId", boundCtx+"\r\n") + closing, either},
		{"context with trailing space", ct, file() + id() + field("contextId", boundCtx+" ") + closing, either},
		{"empty context then bound", ct, file() + field("contextId", "") + field("contextId", boundCtx) + closing, either},
		{"bound then other", ct, file() + field("contextId", boundCtx) + field("contextID", otherCtx) + closing, refuse},
		{"bound then other after large file", ct, field("contextId", boundCtx) + bigFile + field("contextId", otherCtx) + closing, refuse},
		{"other only", ct, file() + id() + field("contextId", otherCtx) + closing, refuse},

		// Framing of the multipart stream.
		{"LF-only line ends", ct, lf, refuse},
		{"LF-only smuggle", ct, strings.ReplaceAll(smuggle(`Content-Disposition: form-data; name="contextId"`), "\r\n", "\n"), refuse},
		{"mixed line ends", ct, file() + "--" + bnd + "\nContent-Disposition: form-data; name=\"contextId\"\n\n" + otherCtx + "\r\n" + field("contextId", boundCtx) + closing, either},
		{"preamble", ct, "This is a preamble.\r\n" + file() + id() + field("contextId", boundCtx) + closing, either},
		{"preamble with a fake part", ct, "--" + bnd + "x\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + otherCtx + "\r\n" + file() + field("contextId", boundCtx) + closing, either},
		{"epilogue with a part", ct, file() + field("contextId", boundCtx) + closing + field("contextId", otherCtx) + closing, either},
		{"transport padding after delimiter", ct, file() + "--" + bnd + "  \r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + otherCtx + "\r\n" + field("contextId", boundCtx) + closing, either},
		{"junk after delimiter", ct, file() + "--" + bnd + "junk\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n" + otherCtx + "\r\n" + field("contextId", boundCtx) + closing, either},
		{"no closing delimiter", ct, file() + id() + field("contextId", boundCtx), refuse},
		{"closing without CRLF", ct, file() + id() + field("contextId", boundCtx) + "--" + bnd + "--", either},
		{"delimiter inside a value", ct, file() + p("x\r\n--"+bnd+"\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n"+otherCtx, `Content-Disposition: form-data; name="id"`) + field("contextId", boundCtx) + closing, either},

		// The Content-Type of the request.
		{"boundary given twice", "multipart/form-data; boundary=" + bnd + "; boundary=other", smuggle(`Content-Disposition: form-data; name="contextId"`), refuse},
		{"boundary with trailing space", `multipart/form-data; boundary="` + bnd + ` "`, file() + field("contextId", boundCtx) + closing, either},
		{"upper-case media type", "Multipart/Form-Data; BOUNDARY=" + bnd, file() + id() + field("contextId", boundCtx) + closing, either},
		{"charset on the request", "multipart/form-data; boundary=" + bnd + "; charset=utf-16", file() + id() + field("contextId", boundCtx) + closing, either},
		{"multipart/mixed", "multipart/mixed; boundary=" + bnd, file() + id() + field("contextId", boundCtx) + closing, refuse},
		{"no boundary", "multipart/form-data", file() + id() + field("contextId", boundCtx) + closing, refuse},
		{"urlencoded", "application/x-www-form-urlencoded", "contextId=" + otherCtx, refuse},
	}
}

func utf16(s string) string {
	var b strings.Builder
	b.WriteString("\xff\xfe")
	for i := 0; i < len(s); i++ {
		b.WriteByte(s[i])
		b.WriteByte(0)
	}
	return b.String()
}

// fileCorpus reads formctx's adversarial corpus, formctx/testdata/adversarial
// (one body per *.body file; see README.txt there): the Content-Type is the
// file's first line, up to its CRLF or LF, and the body is the rest.
func fileCorpus(t testing.TB) []corpusCase {
	dir := filepath.Join("..", "formctx", "testdata", "adversarial")
	paths, err := filepath.Glob(filepath.Join(dir, "*.body"))
	if err != nil {
		t.Fatal(err)
	}
	var cs []corpusCase
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		line, rest, ok := bytes.Cut(b, []byte("\n"))
		if !ok {
			t.Fatalf("%s: no Content-Type line", path)
		}
		cs = append(cs, corpusCase{name: "file " + filepath.Base(path), ct: string(bytes.TrimSuffix(line, []byte("\r"))), body: string(rest), want: either})
	}
	return cs
}

func corpus(t testing.TB) []corpusCase {
	return append(builtinCorpus(), fileCorpus(t)...)
}

// TestCorpus sends every corpus body through keygate. For each body it
// forwards, Go, werkzeug and busboy each refuse it or read only the bound
// context; a body it refuses gets a 4xx in the spec's shape.
func TestCorpus(t *testing.T) {
	setup(t)
	var forwarded, refused int
	for _, c := range corpus(t) {
		t.Run(c.name, func(t *testing.T) {
			o := send(t, c.ct, []byte(c.body))
			if err := check([]byte(c.body), o); err != nil {
				t.Fatal(err)
			}
			switch {
			case c.want == forward && !o.forwarded:
				t.Fatalf("a well-formed upload was refused with %d: %s", o.status, o.errBody)
			case c.want == forward:
				if err := readsBound(o); err != nil {
					t.Fatal(err)
				}
			case c.want == refuse && o.forwarded:
				t.Fatalf("forwarded; parsers read %+v", o.report.Parsers)
			}
			if o.forwarded {
				forwarded++
			} else {
				refused++
			}
		})
	}
	t.Logf("corpus: %d bodies, %d forwarded, %d refused", forwarded+refused, forwarded, refused)
}

// TestCheckCatchesADifferential makes sure the invariant is not vacuous: a
// report in which one parser reads another context fails it.
func TestCheckCatchesADifferential(t *testing.T) {
	body := []byte("x")
	o := outcome{forwarded: true, report: upstreamReport{
		ContentType: []string{ct},
		SHA256:      "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
		Parsers: map[string]parsed{
			"go":       {Fields: [][]string{{"contextId", boundCtx, "field"}}},
			"werkzeug": {Fields: [][]string{{"contextId", otherCtx, "field"}}},
		},
	}}
	if err := check(body, o); !errors.Is(err, errDifferential) {
		t.Fatalf("check = %v, want a differential", err)
	}
	o.report.Parsers["werkzeug"] = parsed{Error: "refused"}
	if err := check(body, o); err != nil {
		t.Fatalf("a refusing parser is no differential: %v", err)
	}
}
