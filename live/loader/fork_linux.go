package loader

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// forkedFinit runs finit_module(fd, params, flags) in a forked child of this
// process, at the scheduling priority nice (0 leaves it as this process's),
// and waits for it up to timeout: the child's exit status is the errno. A child still inside the kernel at the deadline is left there
// (errStillLoading); it is a process of its own, so nothing this process
// does later, exec of the real init included, waits for it.
//
// The child is a bare copy of this process that runs two system calls and
// exits: no exec and no Go runtime start, which under QEMU's TCG costs a
// tenth of a second per load.
func forkedFinit(fd int, params string, flags, nice int, timeout time.Duration) error {
	p, err := unix.BytePtrFromString(params)
	if err != nil {
		return fmt.Errorf("module parameters: %w", err)
	}
	pid, err := forkCall(nice, unix.SYS_FINIT_MODULE, uintptr(fd), uintptr(unsafe.Pointer(p)), uintptr(flags))
	runtime.KeepAlive(p)
	if err != nil {
		return err
	}
	return waitCall(pid, timeout)
}

// forkedInit is forkedFinit for init_module(image, len(image), params): a
// module /init decompressed loads under the same deadline and priority. The
// child has its own copy of image (fork copies the address space).
func forkedInit(image []byte, params string, nice int, timeout time.Duration) error {
	p, err := unix.BytePtrFromString(params)
	if err != nil {
		return fmt.Errorf("module parameters: %w", err)
	}
	if len(image) == 0 {
		return unix.ENOEXEC
	}
	pid, err := forkCall(nice, unix.SYS_INIT_MODULE, uintptr(unsafe.Pointer(&image[0])), uintptr(len(image)), uintptr(unsafe.Pointer(p)))
	runtime.KeepAlive(image)
	runtime.KeepAlive(p)
	if err != nil {
		return err
	}
	return waitCall(pid, timeout)
}

// errForkFailed wraps a failed clone: the caller loads in its own process.
var errForkFailed = errors.New("fork failed")

// forkCall forks a child that sets its nice value to nice (when not 0; a
// refusal, EACCES without CAP_SYS_NICE, leaves it as it was), makes the
// system call trap(a1, a2, a3) and exits with its errno (0 on success). Every signal is blocked on this thread
// around the fork, so the child, which inherits that mask, never runs a Go
// signal handler; it runs no Go code beyond the system calls.
func forkCall(nice int, trap, a1, a2, a3 uintptr) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^uint64(0)
	}
	if _, _, e := syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), kernelSigsetSize, 0, 0); e != 0 {
		return 0, fmt.Errorf("%w: block signals: %w", errForkFailed, e)
	}
	pid, e := rawForkCall(nice, trap, a1, a2, a3)
	syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, kernelSigsetSize, 0, 0)
	if e != 0 {
		return 0, fmt.Errorf("%w: clone: %w", errForkFailed, e)
	}
	return pid, nil
}

// rawForkCall is the fork itself. The child side may only make raw system
// calls: it shares nothing with this process's runtime (no allocation, no
// stack growth, no scheduler), as in package syscall's forkAndExecInChild.
//
//go:nosplit
//go:norace
func rawForkCall(nice int, trap, a1, a2, a3 uintptr) (int, syscall.Errno) {
	r1, _, e := syscall.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	if r1 != 0 {
		return int(r1), 0
	}
	if nice != 0 {
		// who 0: the calling thread, the child's only one.
		syscall.RawSyscall(unix.SYS_SETPRIORITY, unix.PRIO_PROCESS, 0, uintptr(nice))
	}
	_, _, e = syscall.RawSyscall(trap, a1, a2, a3)
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, uintptr(e), 0, 0)
	}
}

// waitCall waits up to timeout for the child pid of forkCall and returns its
// system call's error: nil, the errno, or errStillLoading at the deadline
// (the child is reaped later by whoever is pid 1 then).
func waitCall(pid int, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				done <- fmt.Errorf("wait for the load of pid %d: %w", pid, err)
				return
			}
			break
		}
		switch {
		case ws.Exited() && ws.ExitStatus() == 0:
			done <- nil
		case ws.Exited():
			done <- unix.Errno(ws.ExitStatus())
		default:
			done <- fmt.Errorf("load process %d ended by signal %v", pid, ws.Signal())
		}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return errStillLoading
	}
}

// kernelSigsetSize is the kernel's sigset_t size rt_sigprocmask requires (64
// signals), not the C library's.
const kernelSigsetSize = 8
