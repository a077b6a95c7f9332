package gateway_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/keygate/keygate/gateway"
)

// Every error keygate produces has the spec's shape and carries its trace
// id in the body and in X-Trace-Id.
func ExampleWriteError() {
	w := httptest.NewRecorder()
	gateway.WriteError(w, "4bf92f3577b34da6a3ce929d0e0e4736", 401, "Unauthorized: API key missing; send it in the x-api-key header")
	fmt.Println(w.Code, w.Header().Get("Content-Type"), w.Header().Get("X-Trace-Id"))
	fmt.Print(w.Body.String())
	// Output:
	// 401 application/json 4bf92f3577b34da6a3ce929d0e0e4736
	// {"StateText":"ERROR","TraceId":"4bf92f3577b34da6a3ce929d0e0e4736","Messages":["Unauthorized: API key missing; send it in the x-api-key header"]}
}
