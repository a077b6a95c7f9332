// Package differential holds keygate's parser-differential tests: the proof
// that every multipart parser downstream reads the context keygate checked.
//
// The tests send adversarial /sync bodies through a real keygate gateway
// to a stand-in upstream that hands the bytes it received to three
// independent real parsers: Go's (*http.Request).ParseMultipartForm,
// Python's werkzeug (parsers/werkzeug_server.py, run with Debian's
// python3-werkzeug) and Node's busboy (parsers/busboy, installed with npm
// by `make deps`). For every body keygate forwards, each parser must either
// refuse it or read exactly the bound context in every field that an
// application could take for the context field. A body keygate refuses is
// never seen by the parsers.
//
// The corpus is built in corpus_test.go and read from
// formctx/testdata/adversarial; FuzzDifferential mutates it. `make test`
// runs the fuzz target for a short fixed time and `make fuzz` longer.
//
// The package has no non-test code beyond this comment.
package differential
