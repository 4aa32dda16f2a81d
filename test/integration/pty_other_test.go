//go:build !linux

package integration

import (
	"errors"
	"os"
)

// openPTY is implemented on Linux only: tests that drive a terminal skip
// elsewhere.
func openPTY(cols, rows uint16) (control, terminal *os.File, err error) {
	return nil, nil, errors.ErrUnsupported
}
