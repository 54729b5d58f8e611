package fwcfg

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Ports of fw_cfg on x86 (QEMU's FW_CFG_IO_BASE): the selector (16-bit
// writes) and the data port (byte reads).
const (
	portSelector = 0x510
	portData     = 0x511
)

// inb and outw are the instructions (ports_amd64.s).
func inb(port uint16) uint8
func outw(port uint16, val uint16)

// ports is the Device of the I/O ports, valid on the thread that opened them.
type ports struct{}

func (ports) Select(key uint16) { outw(portSelector, key) }

func (ports) Read(p []byte) {
	for i := range p {
		p[i] = inb(portData)
	}
}

// withPorts runs f with access to fw_cfg's two ports. I/O permissions
// belong to one thread, and outlive execve: f runs on a goroutine locked to
// a thread that ends with it (it is never unlocked), so no other goroutine,
// and not the real init /init later execs, ever holds them.
func withPorts(f func(Device) error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("fw_cfg: port access crashed: %v", r)
			}
		}()
		if err := unix.Ioperm(portSelector, 2, 1); err != nil {
			done <- fmt.Errorf("fw_cfg: ioperm %#x: %w", portSelector, err)
			return
		}
		err := f(ports{})
		_ = unix.Ioperm(portSelector, 2, 0)
		done <- err
	}()
	return <-done
}
