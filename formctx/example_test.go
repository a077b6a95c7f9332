package formctx_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"

	"github.com/keygate/keygate/formctx"
)

func ExampleRead() {
	// A client's upload: the file first, the context after it.
	var upload bytes.Buffer
	w := multipart.NewWriter(&upload)
	fw, _ := w.CreateFormFile("files", "invoice.pdf")
	fw.Write([]byte("%PDF-1.7 ..."))
	w.WriteField("id", "3e2d1c0b-a987-4654-8321-0fedcba98765")
	w.WriteField("contextId", "6f1c2a54-3b8e-4d2f-9a7c-0e5b1d4c8f21")
	w.Close()
	original := bytes.Clone(upload.Bytes())

	body, err := formctx.Read(&upload, w.FormDataContentType(), formctx.Config{MaxBytes: 10 << 20})
	if err != nil {
		fmt.Println("refused:", err) // an *formctx.Error carries the status
		return
	}
	defer body.Close()
	fmt.Println("context:", body.Context())

	// Forward body to the upstream; here, read it back.
	forwarded, err := io.ReadAll(body)
	fmt.Println("byte-exact:", bytes.Equal(forwarded, original), err)

	_, err = formctx.Read(bytes.NewReader(original), "application/json", formctx.Config{MaxBytes: 10 << 20})
	var fe *formctx.Error
	if errors.As(err, &fe) {
		fmt.Println(fe.Status, fe.Message)
	}
	// Output:
	// context: 6f1c2a54-3b8e-4d2f-9a7c-0e5b1d4c8f21
	// byte-exact: true <nil>
	// 400 request body must be multipart/form-data
}
