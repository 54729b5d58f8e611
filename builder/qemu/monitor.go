package qemu

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"time"
)

// Monitor sends commands to the human monitor QEMU serves on socket
// (Config.MonitorSocket), one after another, and returns what QEMU answered
// to each; it waits up to 10 s for the socket to accept. For example, to
// plug a disk in while the guest boots:
//
//	qemu.Monitor(sock, "drive_add 0 if=none,id=late,file=root.img,format=raw", "device_add virtio-blk-pci,drive=late")
func Monitor(socket string, commands ...string) ([]string, error) {
	var conn net.Conn
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		if conn, err = net.Dial("unix", socket); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("qemu monitor %s: %w", socket, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	// readPrompt reads up to the "(qemu) " prompt and returns what came before.
	readPrompt := func() (string, error) {
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var b strings.Builder
		for {
			c, err := r.ReadByte()
			if err != nil {
				return b.String(), fmt.Errorf("qemu monitor %s: %w", socket, err)
			}
			b.WriteByte(c)
			if strings.HasSuffix(b.String(), "(qemu) ") {
				return strings.TrimSuffix(b.String(), "(qemu) "), nil
			}
		}
	}
	if _, err := readPrompt(); err != nil { // the banner
		return nil, err
	}
	var out []string
	for _, c := range commands {
		if _, err := fmt.Fprintf(conn, "%s\n", c); err != nil {
			return out, fmt.Errorf("qemu monitor %s: %w", socket, err)
		}
		ans, err := readPrompt()
		if err != nil {
			return out, err
		}
		// The monitor echoes the command (with terminal escapes) on the first
		// line; what follows is the answer.
		if i := strings.IndexByte(ans, '\n'); i >= 0 {
			ans = ans[i+1:]
		} else {
			ans = ""
		}
		out = append(out, strings.TrimSpace(strings.ReplaceAll(ans, "\r", "")))
	}
	return out, nil
}
