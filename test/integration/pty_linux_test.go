package integration

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// openPTY opens a pseudo-terminal of cols × rows: the terminal end for a
// command's standard streams, the controlling end to read what it draws
// and type into it. For driving `top`'s live UI as an operator's terminal
// would.
func openPTY(cols, rows uint16) (control, terminal *os.File, err error) {
	control, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	ioctl := func(req uintptr, arg unsafe.Pointer) error {
		if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, control.Fd(), req, uintptr(arg)); errno != 0 {
			return errno
		}
		return nil
	}
	var unlock int32
	var n uint32
	ws := struct{ rows, cols, x, y uint16 }{rows: rows, cols: cols}
	if err = ioctl(syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err == nil {
		err = ioctl(syscall.TIOCGPTN, unsafe.Pointer(&n))
	}
	if err == nil {
		err = ioctl(syscall.TIOCSWINSZ, unsafe.Pointer(&ws))
	}
	if err == nil {
		terminal, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	}
	if err != nil {
		control.Close()
		return nil, nil, fmt.Errorf("pseudo-terminal: %w", err)
	}
	return control, terminal, nil
}
