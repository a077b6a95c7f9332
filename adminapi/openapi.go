package adminapi

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.1 document of the API, as committed in
// openapi.json and served at /v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

func (a *API) openAPI(*request) (response, error) {
	return response{status: http.StatusOK, raw: OpenAPI, ctype: "application/json"}, nil
}
