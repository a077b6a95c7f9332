package differential

import (
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
	// bound is the key's context; boundCtx when empty.
	bound string
}

// cc is a corpus case bound to boundCtx.
func cc(name, ct, body string, want expectation) corpusCase {
	return corpusCase{name: name, ct: ct, body: body, want: want}
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
	hugeFile := p(strings.Repeat("A", 1<<20), `Content-Disposition: form-data; name="files"; filename="huge.pdf"`, "Content-Type: application/pdf")
	bigFile := p(strings.Repeat("A", 100<<10), `Content-Disposition: form-data; name="files"; filename="big.pdf"`, "Content-Type: application/pdf")
	lf := strings.ReplaceAll(file()+id()+field("contextId", otherCtx)+closing, "\r\n", "\n")
	return []corpusCase{
		// Well-formed controls: keygate forwards, every parser reads them.
		cc("control contextId last", ct, file()+id()+field("contextId", boundCtx)+closing, forward),
		cc("control contextId first", ct, field("contextId", boundCtx)+file()+id()+closing, forward),
		cc("control contextID spelling", ct, file()+id()+field("contextID", boundCtx)+closing, forward),
		cc("control context after 100 KiB file", ct, bigFile+id()+field("contextId", boundCtx)+closing, forward),
		cc("control quoted boundary", `multipart/form-data; boundary="`+bnd+`"`, file()+id()+field("contextId", boundCtx)+closing, forward),
		cc("control upper-case context value", ct, file()+id()+field("contextId", strings.ToUpper(boundCtx))+closing, forward),
		cc("control both spellings agree", ct, field("contextId", boundCtx)+file()+field("contextID", boundCtx)+closing, forward),

		// Finding 1: dispositions other than form-data.
		cc("attachment disposition", ct, smuggle(`Content-Disposition: attachment; name="contextId"`), refuse),
		cc("inline disposition", ct, smuggle(`Content-Disposition: inline; name="contextId"`), refuse),
		cc("form-data with trailing junk", ct, smuggle(`Content-Disposition: form-data; name="contextId" junk`), refuse),
		cc("unknown disposition type", ct, smuggle(`Content-Disposition: x-form; name="contextId"`), refuse),
		cc("disposition without type", ct, smuggle(`Content-Disposition: name="contextId"`), refuse),
		cc("upper-case disposition type", ct, smuggle(`Content-Disposition: FORM-DATA; name="contextId"`), either),
		cc("upper-case header name", ct, smuggle(`CONTENT-DISPOSITION: form-data; name="contextId"`), either),

		// Names: RFC 2231/5987, duplicates, escapes, case, arrays.
		cc("rfc2231 name", ct, smuggle(`Content-Disposition: form-data; name*=UTF-8''contextId`), either),
		cc("rfc2231 percent-encoded name", ct, smuggle(`Content-Disposition: form-data; name*=UTF-8''%63ontextId`), either),
		cc("rfc2231 continuation", ct, smuggle(`Content-Disposition: form-data; name*0="context"; name*1="Id"`), either),
		cc("name and name* disagree", ct, smuggle(`Content-Disposition: form-data; name="other"; name*=UTF-8''contextId`), either),
		cc("duplicate name, context second", ct, smuggle(`Content-Disposition: form-data; name="x"; name="contextId"`), either),
		cc("duplicate name, context first", ct, smuggle(`Content-Disposition: form-data; name="contextId"; name="x"`), either),
		cc("unquoted name", ct, smuggle(`Content-Disposition: form-data; name=contextId`), either),
		cc("single-quoted name", ct, smuggle(`Content-Disposition: form-data; name='contextId'`), either),
		cc("backslash in name", ct, smuggle(`Content-Disposition: form-data; name="context\Id"`), either),
		cc("percent in name", ct, smuggle(`Content-Disposition: form-data; name="context%49d"`), either),
		cc("lower-case name", ct, smuggle(`Content-Disposition: form-data; name="contextid"`), either),
		cc("upper-case name", ct, smuggle(`Content-Disposition: form-data; name="CONTEXTID"`), either),
		cc("php array name", ct, smuggle(`Content-Disposition: form-data; name="contextId[]"`), either),
		cc("php keyed array name", ct, smuggle(`Content-Disposition: form-data; name="contextId[0]"`), either),
		cc("name with NUL", ct, smuggle("Content-Disposition: form-data; name=\"contextId\x00\""), either),
		cc("name with trailing space", ct, smuggle(`Content-Disposition: form-data; name="contextId "`), either),
		cc("space before name parameter value", ct, smuggle(`Content-Disposition: form-data; name = "contextId"`), either),
		cc("no space after semicolon", ct, smuggle(`Content-Disposition: form-data;name="contextId"`), either),
		cc("context as a file", ct, smuggle(`Content-Disposition: form-data; name="contextId"; filename="ctx.txt"`), either),
		cc("filename* on context", ct, smuggle(`Content-Disposition: form-data; name="contextId"; filename*=UTF-8''ctx.txt`), either),

		// Part headers.
		cc("two dispositions, context second", ct, smuggle(`Content-Disposition: form-data; name="x"`, `Content-Disposition: form-data; name="contextId"`), refuse),
		cc("two dispositions, context first", ct, smuggle(`Content-Disposition: form-data; name="contextId"`, `Content-Disposition: form-data; name="x"`), refuse),
		cc("space before colon", ct, smuggle(`Content-Disposition : form-data; name="contextId"`), either),
		cc("folded header", ct, smuggle("Content-Disposition: form-data;", ` name="contextId"`), either),
		cc("tab-folded header", ct, smuggle("Content-Disposition: form-data;", "\tname=\"contextId\""), either),
		cc("header line without colon", ct, smuggle(`Content-Disposition: form-data; name="contextId"`, "garbage"), either),
		cc("bare CR in header", ct, smuggle("Content-Disposition: form-data; name=\"x\"\rContent-Disposition: form-data; name=\"contextId\""), either),
		cc("base64 context", ct, file()+id()+p("OTk5OTk5OTktODg4OC00Nzc3LTg2NjYtNTU1NTU1NTU1NTU1", `Content-Disposition: form-data; name="contextId"`, "Content-Transfer-Encoding: base64")+closing, refuse),
		cc("quoted-printable context", ct, file()+id()+p("=39"+otherCtx[1:], `Content-Disposition: form-data; name="contextId"`, "Content-Transfer-Encoding: quoted-printable")+closing, refuse),
		cc("quoted-printable bound context", ct, file()+id()+p(boundCtx, `Content-Disposition: form-data; name="contextId"`, "Content-Transfer-Encoding: quoted-printable")+closing, refuse),
		cc("utf-16 context", ct, file()+id()+p(utf16(otherCtx), `Content-Disposition: form-data; name="contextId"`, "Content-Type: text/plain; charset=utf-16")+closing, either),
		cc("_charset_ field", ct, field("_charset_", "utf-16")+file()+id()+field("contextId", boundCtx)+closing, either),
		cc("context part type json", ct, file()+id()+p(`"`+otherCtx+`"`, `Content-Disposition: form-data; name="contextId"`, "Content-Type: application/json")+closing, either),
		cc("part without headers", ct, file()+p("Content-Disposition: form-data; name=\"contextId\"\r\n\r\n"+otherCtx)+field("contextId", boundCtx)+closing, either),
		cc("part without disposition", ct, file()+p(otherCtx, "Content-Type: text/plain")+field("contextId", boundCtx)+closing, either),

		// Values.
		cc("context with trailing CRLF", ct, file()+id()+field("contextId", boundCtx+"\r\n")+closing, either),
		cc("context with trailing space", ct, file()+id()+field("contextId", boundCtx+" ")+closing, either),
		cc("empty context then bound", ct, file()+field("contextId", "")+field("contextId", boundCtx)+closing, either),
		cc("bound then other", ct, file()+field("contextId", boundCtx)+field("contextID", otherCtx)+closing, refuse),
		cc("bound then other after large file", ct, field("contextId", boundCtx)+bigFile+field("contextId", otherCtx)+closing, refuse),
		cc("other only", ct, file()+id()+field("contextId", otherCtx)+closing, refuse),

		// Framing of the multipart stream.
		cc("LF-only line ends", ct, lf, refuse),
		cc("LF-only smuggle", ct, strings.ReplaceAll(smuggle(`Content-Disposition: form-data; name="contextId"`), "\r\n", "\n"), refuse),
		cc("mixed line ends", ct, file()+"--"+bnd+"\nContent-Disposition: form-data; name=\"contextId\"\n\n"+otherCtx+"\r\n"+field("contextId", boundCtx)+closing, either),
		cc("preamble", ct, "This is a preamble.\r\n"+file()+id()+field("contextId", boundCtx)+closing, either),
		cc("preamble with a fake part", ct, "--"+bnd+"x\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n"+otherCtx+"\r\n"+file()+field("contextId", boundCtx)+closing, either),
		cc("epilogue with a part", ct, file()+field("contextId", boundCtx)+closing+field("contextId", otherCtx)+closing, either),
		cc("transport padding after delimiter", ct, file()+"--"+bnd+"  \r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n"+otherCtx+"\r\n"+field("contextId", boundCtx)+closing, either),
		cc("junk after delimiter", ct, file()+"--"+bnd+"junk\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n"+otherCtx+"\r\n"+field("contextId", boundCtx)+closing, either),
		cc("no closing delimiter", ct, file()+id()+field("contextId", boundCtx), refuse),
		cc("closing without CRLF", ct, file()+id()+field("contextId", boundCtx)+"--"+bnd+"--", either),
		cc("delimiter inside a value", ct, file()+p("x\r\n--"+bnd+"\r\nContent-Disposition: form-data; name=\"contextId\"\r\n\r\n"+otherCtx, `Content-Disposition: form-data; name="id"`)+field("contextId", boundCtx)+closing, either),

		// The Content-Type of the request.
		cc("boundary given twice", "multipart/form-data; boundary="+bnd+"; boundary=other", smuggle(`Content-Disposition: form-data; name="contextId"`), refuse),
		cc("boundary with trailing space", `multipart/form-data; boundary="`+bnd+` "`, file()+field("contextId", boundCtx)+closing, either),
		cc("upper-case media type", "Multipart/Form-Data; BOUNDARY="+bnd, file()+id()+field("contextId", boundCtx)+closing, either),
		// keygate forwards it; werkzeug takes no form from a media type
		// in capitals and reads none of the body, which its server must
		// still take whole (the fuzzer found a broken pipe here).
		cc("upper-case media type, 1 MiB file", "Multipart/Form-Data; boundary="+bnd, hugeFile+id()+field("contextId", boundCtx)+closing, either),
		cc("charset on the request", "multipart/form-data; boundary="+bnd+"; charset=utf-16", file()+id()+field("contextId", boundCtx)+closing, either),
		cc("multipart/mixed", "multipart/mixed; boundary="+bnd, file()+id()+field("contextId", boundCtx)+closing, refuse),
		cc("no boundary", "multipart/form-data", file()+id()+field("contextId", boundCtx)+closing, refuse),
		cc("urlencoded", "application/x-www-form-urlencoded", "contextId="+otherCtx, refuse),
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
// (see README.txt there): each NNN-name.body is a raw body and NNN-name.meta
// gives its content-type, the bound context and what formctx does with it
// ("accept" or "refuse STATUS"), which keygate must do too.
func fileCorpus(t testing.TB) []corpusCase {
	dir := filepath.Join("..", "formctx", "testdata", "adversarial")
	paths, err := filepath.Glob(filepath.Join(dir, "*.body"))
	if err != nil {
		t.Fatal(err)
	}
	var cs []corpusCase
	for _, path := range paths {
		body, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		meta, err := os.ReadFile(strings.TrimSuffix(path, ".body") + ".meta")
		if err != nil {
			t.Fatal(err)
		}
		c := corpusCase{name: "file " + strings.TrimSuffix(filepath.Base(path), ".body"), body: string(body)}
		for _, line := range strings.Split(string(meta), "\n") {
			k, v, _ := strings.Cut(line, ": ")
			switch k {
			case "content-type":
				c.ct = v
			case "context":
				c.bound = v
			case "expect":
				if v == "accept" {
					c.want = forward
				} else {
					c.want = refuse
				}
			}
		}
		if c.ct == "" || c.bound == "" {
			t.Fatalf("%s: the .meta file names no content-type or context", path)
		}
		cs = append(cs, c)
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
			bound := c.bound
			if bound == "" {
				bound = boundCtx
			}
			o := send(t, bound, c.ct, []byte(c.body))
			if err := check(bound, []byte(c.body), o); err != nil {
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
	if err := check(boundCtx, body, o); !errors.Is(err, errDifferential) {
		t.Fatalf("check = %v, want a differential", err)
	}
	o.report.Parsers["werkzeug"] = parsed{Error: "refused"}
	if err := check(boundCtx, body, o); err != nil {
		t.Fatalf("a refusing parser is no differential: %v", err)
	}
}
