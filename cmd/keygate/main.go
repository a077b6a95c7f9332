// Command keygate is an authenticating reverse proxy for the Document
// Extraction Service. See README.md; `keygate help` lists the commands.
package main

import (
	"os"

	"github.com/keygate/keygate/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
