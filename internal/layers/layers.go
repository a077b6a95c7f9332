// Package layers holds keygate's import layering and, in its test, the
// check that the import graph keeps to it: a package imports only
// packages of lower layers, so no arrow points upward and no cycle can
// form. A new package must be given a layer here.
package layers

// Layers lists keygate's packages (by path within the module) from the
// bottom up. Test-support packages (under internal/testsupport), the
// end-to-end and benchmark programs are outside the layering.
var Layers = [][]string{
	{"internal/inputcheck", "internal/jwscheck"},
	{"product", "redact", "filewatch", "formctx", "framing", "certstore", "standin",
		"internal/atomicfile", "internal/capool", "internal/clientip", "internal/fieldpath", "internal/logline", "internal/statuswriter", "internal/strictjson", "internal/tokencache", "internal/layers"},
	{"redisconn", "tracing", "policy", "usage"},
	{"ratelimit", "tlsconf"},
	{"keystore"},
	{"auth", "keyops"},
	{"oauth2", "gateway", "admintoken", "audit", "tokenissuer"},
	{"adminapi", "portal", "secretscan"},
	{"config"},
	{"server"},
	{"cli"},
	{"cmd/keygate"},
}
