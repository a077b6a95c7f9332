package formctx

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/adversarial and the FuzzRead seeds from adversarialCases")

// advBoundary is the boundary of most adversarial bodies; in a case body
// "B" stands for it (see adv).
const advBoundary = "kgAdv7d3e9f1c"

// advCase is one body of the adversarial corpus: how formctx must judge it,
// with the request's Content-Type and the context the key is bound to.
type advCase struct {
	name string
	why  string // what the case is about
	ct   string // default: multipart/form-data; boundary=advBoundary
	body string
	want *Error // nil: accepted, and Context() == testCtx
}

// adv builds a body from lines joined by CRLF, with "{B}" replaced by the
// boundary, "{C}" by testCtx and "{O}" by otherCtx.
func adv(lines ...string) string {
	s := strings.Join(lines, "\r\n")
	return strings.NewReplacer("{B}", advBoundary, "{C}", testCtx, "{O}", otherCtx).Replace(s)
}

const (
	cdCtx  = `Content-Disposition: form-data; name="contextId"`
	cdFile = `Content-Disposition: form-data; name="files"; filename="doc.pdf"`
)

var adversarialCases = []advCase{
	// Accepted.
	{name: "ok-context-first", why: "context part first, then a file", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", cdFile, "Content-Type: application/pdf", "", "%PDF-1.7 data", "--{B}--", "")},
	{name: "ok-context-after-file", why: "file first, context last", body: adv("--{B}", cdFile, "", "%PDF data", "--{B}", cdCtx, "", "{C}", "--{B}--", "")},
	{name: "ok-contextID-spelling", why: "contextID spelling", body: adv("--{B}", `Content-Disposition: form-data; name="contextID"`, "", "{C}", "--{B}--", "")},
	{name: "ok-upper-case-name", why: "any letter case of the name is a context part", body: adv("--{B}", `Content-Disposition: form-data; name="CONTEXTID"`, "", "{C}", "--{B}--", "")},
	{name: "ok-token-name", why: "unquoted name", body: adv("--{B}", `Content-Disposition: form-data; name=contextId`, "", "{C}", "--{B}--", "")},
	{name: "ok-no-space-after-semicolon", why: "no OWS after ;", body: adv("--{B}", `Content-Disposition: form-data;name="contextId"`, "", "{C}", "--{B}--", "")},
	{name: "ok-form-data-upper", why: "disposition type letter case", body: adv("--{B}", `Content-Disposition: Form-Data; name="contextId"`, "", "{C}", "--{B}--", "")},
	{name: "ok-lower-case-header-name", why: "header name letter case", body: adv("--{B}", `content-disposition: form-data; name="contextId"`, "", "{C}", "--{B}--", "")},
	{name: "ok-preamble", why: "a preamble ending in CRLF", body: adv("This is the preamble.", "--{B}", cdCtx, "", "{C}", "--{B}--", "")},
	{name: "ok-empty-line-preamble", why: "a preamble that is one CRLF", body: adv("", "--{B}", cdCtx, "", "{C}", "--{B}--", "")},
	{name: "ok-epilogue", why: "an epilogue after the closing delimiter", body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", "epilogue text", "")},
	{name: "ok-close-without-crlf", why: "the body ends right after --B--", body: adv("--{B}", cdCtx, "", "{C}", "--{B}--")},
	{name: "ok-quoted-boundary", why: "the boundary parameter quoted", ct: `multipart/form-data; boundary="` + advBoundary + `"`, body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", "")},
	{name: "ok-bchars-boundary", why: "a boundary with every RFC 2046 special bchar, quoted", ct: `multipart/form-data; boundary="a'()+_,-./:=? z"`, body: strings.ReplaceAll(adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), advBoundary, "a'()+_,-./:=? z")},
	{name: "ok-charset-param", why: "a charset on the request type and text/plain; charset=utf-8 on the context part", ct: "multipart/form-data; charset=utf-8; boundary=" + advBoundary, body: adv("--{B}", cdCtx, "Content-Type: text/plain; charset=UTF-8", "", "{C}", "--{B}--", "")},
	{name: "ok-cte-7bit", why: "Content-Transfer-Encoding 7bit on the context part", body: adv("--{B}", cdCtx, "Content-Transfer-Encoding: 7bit", "", "{C}", "--{B}--", "")},
	{name: "ok-cte-base64-file", why: "base64 on a non-context part", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", cdFile, "Content-Transfer-Encoding: base64", "", "JVBERi0=", "--{B}--", "")},
	{name: "headerless-part", why: "a part with no header lines: werkzeug reads its body as the header block", body: adv("--{B}", "", "anonymous", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "headerless-part-hiding-context", why: "werkzeug reads a context part out of a headerless part's body", body: adv("--{B}", "", cdCtx, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "no-disposition", why: "a part with headers but no Content-Disposition (RFC 7578 requires one; werkzeug refuses the body)", body: adv("--{B}", "Content-Type: text/plain", "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "ok-two-agreeing", why: "contextId and contextID agree", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", `Content-Disposition: form-data; name="contextID"`, "", "{C}", "--{B}--", "")},
	{name: "rfc2231-name", why: "name*=utf-8''contextId: Go and werkzeug read contextId, busboy no name", body: adv("--{B}", `Content-Disposition: form-data; name*=utf-8''contextId`, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "rfc2231-name-pct", why: "name* with percent-encoding that decodes to contextId", body: adv("--{B}", `Content-Disposition: form-data; name*=UTF-8''context%49d`, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "name-and-name-star-agree", why: "name and name* agree, but name* is refused whatever it says", body: adv("--{B}", `Content-Disposition: form-data; name="contextId"; name*=utf-8''contextId`, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "ok-boundary-mid-line", why: "the boundary inside a line of file data is data to every parser", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", cdFile, "", "x--{B}", "y--{B}x", "--{B}--", "")},
	{name: "ok-utf8-filename", why: "raw UTF-8 in a file part's filename", body: adv("--{B}", `Content-Disposition: form-data; name="files"; filename="r`+"\xc3\xa9"+`sum`+"\xc3\xa9"+`.pdf"`, "", "data", "--{B}", cdCtx, "", "{C}", "--{B}--", "")},

	// The issue 7 findings.
	{name: "attachment-first", why: "Go skips a non-form-data part, werkzeug reads it", body: adv("--{B}", `Content-Disposition: attachment; name="contextId"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "inline-first", why: "inline disposition", body: adv("--{B}", `Content-Disposition: inline; name="contextId"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "attachment-later", why: "a later attachment context part", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", `Content-Disposition: attachment; name="contextId"`, "", "{O}", "--{B}--", ""), want: ErrDisposition},
	{name: "disposition-junk", why: "junk after the parameters: Go's FormName is empty, werkzeug reads the name", body: adv("--{B}", `Content-Disposition: form-data; name="contextId" junk`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "disposition-twice", why: "two Content-Disposition headers", body: adv("--{B}", `Content-Disposition: form-data; name="x"`, cdCtx, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "disposition-no-type", why: "parameters without a type", body: adv("--{B}", `Content-Disposition: ; name="contextId"`, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "disposition-trailing-semicolon", why: "a trailing ;", body: adv("--{B}", `Content-Disposition: form-data; name="contextId";`, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "disposition-space-around-equals", why: "whitespace around =", body: adv("--{B}", `Content-Disposition: form-data; name = "contextId"`, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "duplicate-name-param", why: "name twice (different case): parsers take the first or the last", body: adv("--{B}", `Content-Disposition: form-data; name="x"; NAME="contextId"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "backslash-in-quoted", why: `filename="a\"; name="contextId": quoted-pair or not changes the name`, body: adv("--{B}", `Content-Disposition: form-data; name="x"; filename="a\"; name="contextId"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDisposition},
	{name: "unterminated-quote", why: "a quoted string that does not end", body: adv("--{B}", `Content-Disposition: form-data; name="contextId`, "", "{C}", "--{B}--", ""), want: ErrDisposition},

	// Names.
	{name: "name-percent", why: "a percent sign in a name: some parsers decode it", body: adv("--{B}", `Content-Disposition: form-data; name="context%49d"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "name-star-disagrees", why: "name and name* disagree: Go takes name*, PHP name", body: adv("--{B}", `Content-Disposition: form-data; name="x"; name*=utf-8''contextId`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "name-continuation", why: "RFC 2231 continuations name*0/name*1", body: adv("--{B}", `Content-Disposition: form-data; name*0="cont"; name*1="extId"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "name-star-bad-charset", why: "name* in a charset other than utf-8, us-ascii, iso-8859-1", body: adv("--{B}", `Content-Disposition: form-data; name*=utf-16''contextId`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "name-star-latin1", why: "name* in iso-8859-1: Go does not decode it, werkzeug and busboy do", body: adv("--{B}", `Content-Disposition: form-data; name*=iso-8859-1''contextId`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "name-leading-space", why: `PHP trims the leading space of " contextId"`, body: adv("--{B}", `Content-Disposition: form-data; name=" contextId"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "name-non-ascii", why: "a non-ASCII name (dotless i)", body: adv("--{B}", `Content-Disposition: form-data; name="context`+"\xc4\xb1"+`d"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "name-with-separators", why: `a naive splitter reads name="a;name=contextId" as contextId`, body: adv("--{B}", `Content-Disposition: form-data; name="a;name=contextId"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrFieldName},
	{name: "name-php-array", why: "PHP reads contextId[] as contextId", body: adv("--{B}", `Content-Disposition: form-data; name="contextId[]"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrFieldName},

	// Context parts.
	{name: "context-cte-base64", why: "Go's ParseMultipartForm does not decode base64, others may", body: adv("--{B}", cdCtx, "Content-Transfer-Encoding: base64", "", "NmYxYzJhNTQ=", "--{B}--", ""), want: ErrContextPart},
	{name: "context-cte-qp", why: "Go's NextPart decodes quoted-printable, NextRawPart does not", body: adv("--{B}", cdCtx, "Content-Transfer-Encoding: quoted-printable", "", "{C}=", "--{B}--", ""), want: ErrContextPart},
	{name: "context-charset-utf16", why: "a charset that changes the value", body: adv("--{B}", cdCtx, "Content-Type: text/plain; charset=utf-16", "", "{C}", "--{B}--", ""), want: ErrContextPart},
	{name: "context-json-type", why: "a non-text context part", body: adv("--{B}", cdCtx, "Content-Type: application/json", "", "{C}", "--{B}--", ""), want: ErrContextPart},
	{name: "context-with-filename", why: "werkzeug and Go file a part with a filename under files, not form", body: adv("--{B}", `Content-Disposition: form-data; name="contextId"; filename="c.txt"`, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrContextPart},
	{name: "context-value-space", why: "whitespace in the value", body: adv("--{B}", cdCtx, "", "{C} ", "--{B}--", ""), want: ErrContextValue},
	{name: "context-value-crlf", why: "CRLF inside the value", body: adv("--{B}", cdCtx, "", "{C}", "", "--{B}--", ""), want: ErrContextValue},
	{name: "context-value-kelvin", why: "a non-ASCII value", body: adv("--{B}", cdCtx, "", "\xe2\x84\xaa{C}", "--{B}--", ""), want: ErrContextValue},
	{name: "context-conflict", why: "contextId and contextID disagree", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", `Content-Disposition: form-data; name="contextID"`, "", "{O}", "--{B}--", ""), want: ErrConflictContext},
	{name: "context-conflict-rfc2231", why: "a later name* context part disagrees", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", `Content-Disposition: form-data; name*=utf-8''contextId`, "", "{O}", "--{B}--", ""), want: ErrFieldName},
	{name: "context-missing", why: "no context part", body: adv("--{B}", cdFile, "", "data", "--{B}--", ""), want: ErrMissingContext},
	{name: "context-empty", why: "an empty first context part", body: adv("--{B}", cdCtx, "", "", "--{B}--", ""), want: ErrMissingContext},

	// Delimiters and line ends.
	{name: "lf-only", why: "LF line ends: Go and werkzeug accept them, busboy does not", body: strings.ReplaceAll(adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), "\r\n", "\n"), want: ErrDelimiter},
	{name: "bare-lf-delimiter-in-data", why: "a delimiter after a bare LF inside a file: werkzeug and PHP split there, Go does not", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", cdFile, "", "data\n--{B}\r\n"+cdCtx+"\r\n\r\n{O}", "--{B}--", ""), want: ErrDelimiter},
	{name: "bare-cr-delimiter-in-data", why: "werkzeug takes a bare CR for a line break", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", cdFile, "", "data\r--{B}\r\n"+cdCtx+"\r\n\r\n{O}", "--{B}--", ""), want: ErrDelimiter},
	{name: "transport-padding", why: "whitespace after the boundary: Go and werkzeug skip it, busboy does not", body: adv("--{B} ", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDelimiter},
	{name: "close-padding", why: "whitespace after the closing boundary", body: adv("--{B}", cdCtx, "", "{C}", "--{B}--  ", ""), want: ErrDelimiter},
	{name: "boundary-prefix-line", why: "a line --Bx inside data: PHP matches the prefix", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", cdFile, "", "data", "--{B}x", "more", "--{B}--", ""), want: ErrDelimiter},
	{name: "preamble-boundary-mid-line", why: "werkzeug finds a delimiter mid-line in the preamble", body: adv("junk--{B}", cdCtx, "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDelimiter},
	{name: "preamble-lf", why: "a preamble ending in a bare LF", body: "preamble\n" + adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDelimiter},
	{name: "boundary-right-after-headers", why: "a delimiter right after the header block: Go reads an empty part, busboy does not", body: adv("--{B}", cdFile, "", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDelimiter},
	{name: "boundary-in-header", why: "the boundary inside a header value", body: adv("--{B}", `Content-Disposition: form-data; name="files"; filename="--{B}"`, "", "x", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrDelimiter},
	{name: "part-in-epilogue", why: "a part after the closing delimiter", body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", "--{B}", cdCtx, "", "{O}", "--{B}--", ""), want: ErrDelimiter},
	{name: "junk-after-close", why: "bytes right after --B--", body: adv("--{B}", cdCtx, "", "{C}", "--{B}--junk"), want: ErrDelimiter},

	// Part headers.
	{name: "obs-fold", why: "a folded header line", body: adv("--{B}", `Content-Disposition: form-data;`, ` name="contextId"`, "", "{C}", "--{B}--", ""), want: ErrPartHeader},
	{name: "space-before-colon", why: "whitespace between the header name and the colon", body: adv("--{B}", `Content-Disposition : form-data; name="x"`, cdCtx, "", "{C}", "--{B}--", ""), want: ErrPartHeader},
	{name: "nul-in-header", why: "a NUL in a header value", body: adv("--{B}", "Content-Disposition: form-data; name=\"x\"\x00", "", "a", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrPartHeader},
	{name: "bare-cr-in-header", why: "a bare CR in a header line", body: adv("--{B}", "X-A: 1\rContent-Disposition: form-data; name=\"contextId\"", "", "{O}", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrPartHeader},
	{name: "lf-in-headers", why: "a header line ending in a bare LF", body: adv("--{B}", "X-A: 1\n"+cdCtx, "", "{C}", "--{B}--", ""), want: ErrPartHeader},
	{name: "content-type-twice", why: "two Content-Type headers on a part", body: adv("--{B}", cdCtx, "Content-Type: text/plain", "Content-Type: text/plain; charset=utf-16", "", "{C}", "--{B}--", ""), want: ErrPartHeader},
	{name: "cte-twice", why: "two Content-Transfer-Encoding headers", body: adv("--{B}", cdCtx, "Content-Transfer-Encoding: 8bit", "Content-Transfer-Encoding: base64", "", "{C}", "--{B}--", ""), want: ErrPartHeader},
	{name: "nested-multipart", why: "a multipart/mixed part", body: adv("--{B}", cdFile, "Content-Type: multipart/mixed; boundary=inner", "", "--inner", cdCtx, "", "{O}", "--inner--", "--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrPartHeader},

	// The request Content-Type.
	{name: "ct-two-boundaries", why: "boundary twice in the Content-Type", ct: "multipart/form-data; boundary=" + advBoundary + "; boundary=other", body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrNotMultipart},
	{name: "ct-boundary-star", why: "an RFC 2231 boundary*", ct: "multipart/form-data; boundary*=utf-8''" + advBoundary, body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrNotMultipart},
	{name: "ct-boundary-not-bchars", why: "a boundary with a character outside RFC 2046 bchars", ct: "multipart/form-data; boundary=" + advBoundary + "!", body: strings.ReplaceAll(adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), advBoundary, advBoundary+"!"), want: ErrNotMultipart},
	{name: "ct-boundary-trailing-space", why: "a boundary ending in a space", ct: `multipart/form-data; boundary="` + advBoundary + ` "`, body: strings.ReplaceAll(adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), advBoundary, advBoundary+" "), want: ErrNotMultipart},
	{name: "ct-boundary-backslash", why: "a quoted-pair in the boundary", ct: `multipart/form-data; boundary="` + advBoundary + `\x"`, body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrNotMultipart},
	{name: "ct-charset-utf16", why: "a request charset a parser may decode fields in", ct: "multipart/form-data; charset=utf-16; boundary=" + advBoundary, body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrNotMultipart},
	{name: "ct-php-substring", why: `PHP takes the boundary from the first "boundary" substring: xboundary=`, ct: "multipart/form-data; xboundary=other; boundary=" + advBoundary, body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrNotMultipart},
	{name: "ct-boundary-upper-case", why: "BOUNDARY in upper case (PHP searches case-sensitively first)", ct: "multipart/form-data; BOUNDARY=" + advBoundary, body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrNotMultipart},
	{name: "ct-unknown-param", why: "a parameter other than boundary and charset", ct: "multipart/form-data; boundary=" + advBoundary + "; foo=bar", body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrNotMultipart},
	{name: "ct-mixed", why: "multipart/mixed", ct: "multipart/mixed; boundary=" + advBoundary, body: adv("--{B}", cdCtx, "", "{C}", "--{B}--", ""), want: ErrNotMultipart},

	// Truncation.
	{name: "truncated-in-file", why: "the body ends inside a part", body: adv("--{B}", cdCtx, "", "{C}", "--{B}", cdFile, "", "data"), want: ErrMalformed},
	{name: "truncated-close", why: "the body ends inside the closing delimiter", body: adv("--{B}", cdCtx, "", "{C}", "--{B}-"), want: ErrMalformed},
}

func (c advCase) contentType() string {
	if c.ct != "" {
		return c.ct
	}
	return "multipart/form-data; boundary=" + advBoundary
}

// meta is the sidecar file of a corpus body (see testdata/adversarial/README.txt).
func (c advCase) meta() string {
	verdict := "accept"
	if c.want != nil {
		verdict = fmt.Sprintf("refuse %d", c.want.Status)
	}
	return fmt.Sprintf("content-type: %s\ncontext: %s\nexpect: %s\nwhy: %s\n", c.contentType(), testCtx, verdict, c.why)
}

// TestAdversarial runs the corpus through Read and Body, whole and in
// split reads, and checks the corpus files match the table (go test -run
// TestAdversarial -update rewrites them).
func TestAdversarial(t *testing.T) {
	t.Parallel()
	checkCorpusFiles(t)
	for _, c := range adversarialCases {
		for _, rd := range splitReaders {
			t.Run(c.name+"/"+rd.name, func(t *testing.T) {
				t.Parallel()
				body := []byte(c.body)
				b, err := Read(rd.wrap(bytes.NewReader(body)), c.contentType(), Config{MaxBytes: mib, TempDir: t.TempDir()})
				var out []byte
				if err == nil {
					defer b.Close()
					out, err = drain(b, 5)
				}
				if c.want != nil {
					asError(t, err, c.want)
					if len(out) >= len(body) {
						t.Fatalf("refused body yielded all its %d bytes", len(body))
					}
					return
				}
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if b.Context() != testCtx {
					t.Fatalf("Context() = %q, want %q", b.Context(), testCtx)
				}
				if !bytes.Equal(out, body) {
					t.Fatalf("Body yielded %q, want the input", out)
				}
				boundary, _ := formBoundary(c.contentType())
				if why := goDisagrees(body, boundary, testCtx); why != "" {
					t.Fatalf("mime/multipart %s", why)
				}
			})
		}
	}
}

// checkCorpusFiles compares (or with -update, writes) the corpus and the
// fuzz seeds made from it.
func checkCorpusFiles(t *testing.T) {
	t.Helper()
	want := map[string]string{}
	for i, c := range adversarialCases {
		base := fmt.Sprintf("%03d-%s", i+1, c.name)
		want[filepath.Join("testdata", "adversarial", base+".body")] = c.body
		want[filepath.Join("testdata", "adversarial", base+".meta")] = c.meta()
		boundary := advBoundary
		if c.ct != "" {
			boundary = ctBoundaryLoose(c.ct)
		}
		want[filepath.Join("testdata", "fuzz", "FuzzRead", "adv-"+c.name)] = fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nstring(%q)\nuint32(0)\nuint16(0)\n", c.body, boundary)
	}
	if *update {
		for _, dir := range []string{"testdata/adversarial", "testdata/fuzz/FuzzRead"} {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		olds, _ := filepath.Glob("testdata/adversarial/*.body")
		metas, _ := filepath.Glob("testdata/adversarial/*.meta")
		advs, _ := filepath.Glob("testdata/fuzz/FuzzRead/adv-*")
		for _, f := range append(append(olds, metas...), advs...) {
			os.Remove(f)
		}
		for name, content := range want {
			if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		got, err := os.ReadFile(name)
		if err != nil || string(got) != want[name] {
			t.Errorf("%s is missing or stale (err %v); run go test -run TestAdversarial ./formctx/ -update", name, err)
		}
	}
	have, _ := filepath.Glob("testdata/adversarial/*.body")
	if len(have) != len(adversarialCases) {
		t.Errorf("testdata/adversarial holds %d bodies, the table %d; run with -update", len(have), len(adversarialCases))
	}
}

// ctBoundaryLoose returns the boundary parameter of ct as a fuzz seed,
// whether or not formctx accepts it.
func ctBoundaryLoose(ct string) string {
	i := strings.Index(ct, "boundary")
	if i < 0 {
		return ""
	}
	v := ct[i+len("boundary"):]
	v = strings.TrimPrefix(strings.TrimPrefix(v, "*"), "=")
	if j := strings.IndexByte(v, ';'); j >= 0 {
		v = v[:j]
	}
	return strings.Trim(v, `"`)
}

// TestAdversarialErrorsAreDistinct guards the refusal messages: each names
// its rule, and none quotes the body.
func TestAdversarialErrorsAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, e := range []*Error{ErrNotMultipart, ErrMissingContext, ErrConflictContext, ErrMalformed, ErrTooLarge, ErrDelimiter, ErrPartHeader, ErrDisposition, ErrFieldName, ErrContextPart, ErrContextValue} {
		if seen[e.Message] {
			t.Errorf("message %q used twice", e.Message)
		}
		seen[e.Message] = true
		if e.Status != 400 && e.Status != 413 {
			t.Errorf("%q has status %d", e.Message, e.Status)
		}
	}
	var fe *Error
	if !errors.As(error(ErrDelimiter), &fe) {
		t.Fatal("ErrDelimiter is not an *Error")
	}
}
