package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/keygate/keygate/keystore"
)

// errNotWellFormed makes check-format exit 1; its message is printed
// already.
var errNotWellFormed = errors.New("not well-formed")

// keysCheckFormat says whether a string is a well-formed API key or admin
// token: prefix, length, alphabet, checksum. It does no lookup, and never
// prints the string. "-" reads it from standard input (out of the shell's
// history).
func keysCheckFormat(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return usageError{"keys check-format: want exactly one string (or - to read it from standard input)"}
	}
	s := args[0]
	if s == "-" {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && err != io.EOF {
			return err
		}
		s = strings.TrimRight(line, "\r\n")
	}
	what, err := checkFormat(s)
	if err != nil {
		fmt.Fprintf(stdout, "not well-formed: %v\n", err)
		return errNotWellFormed
	}
	fmt.Fprintf(stdout, "well-formed %s (prefix, length and checksum hold)\n", what)
	return nil
}

// checkFormat returns what s is shaped as, or why it is no key or token.
func checkFormat(s string) (string, error) {
	if strings.HasPrefix(s, keystore.AdminTokenPrefix) {
		if err := keystore.ParseAdminToken(s); err != nil {
			return "", err
		}
		return "admin token", nil
	}
	env, err := keystore.Parse(s)
	if err != nil {
		return "", err
	}
	return string(env) + " API key", nil
}
