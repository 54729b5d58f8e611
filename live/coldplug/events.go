package coldplug

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Events are the kernel's device events (uevents, on its
// NETLINK_KOBJECT_UEVENT socket, which it writes with or without udev): a
// wait for a device that wakes when something appears, instead of scanning
// sysfs again and again (a root disk that is plugged in late).
type Events struct{ fd int }

// OpenEvents starts listening for the kernel's device events.
func OpenEvents() (*Events, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("device events: netlink socket: %w", err)
	}
	// Group 1 is the kernel's own broadcast (udev re-sends on group 2).
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("device events: bind: %w", err)
	}
	return &Events{fd: fd}, nil
}

// Wait returns once a device event has come since the last Wait, or after
// d; it reports whether one came, reading every event waiting. Events the
// kernel dropped for a full socket (ENOBUFS) count as one.
func (e *Events) Wait(d time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(e.fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, int(d.Milliseconds())); n <= 0 || err != nil {
		return false
	}
	buf := make([]byte, 16<<10)
	got := false
	for {
		_, _, err := unix.Recvfrom(e.fd, buf, 0)
		switch {
		case err == nil, errors.Is(err, unix.ENOBUFS):
			got = true
		case errors.Is(err, unix.EINTR):
		default: // EAGAIN: nothing more waiting
			return got
		}
	}
}

// Close stops listening.
func (e *Events) Close() error { return unix.Close(e.fd) }
