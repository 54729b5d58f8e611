package pid1

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/report"
)

// reportChannel is the device /init sends the report line to: the command
// line's kpreload.report=, else the device a boot harness names in QEMU's
// fw_cfg (report.ChannelFwCfgName, from qemu_fw_cfg's sysfs file where that
// module has loaded, else through the device's I/O ports, and only where the
// fw_cfg device is there), else none.
func (b *Boot) reportChannel() string {
	if dev := b.flag("kpreload.report", ""); dev != "" {
		return dev
	}
	if b.flag("kpreload.fwcfg", "") == "module" || !b.fwCfgDevice() {
		return ""
	}
	// Where qemu_fw_cfg has loaded, its sysfs file; else the I/O ports.
	data, err := readBounded(b.sysPath("/sys/firmware/qemu_fw_cfg/by_name/"+report.ChannelFwCfgName+"/raw"), maxChannelName)
	if errors.Is(err, errTooLong) {
		b.warnf("fw_cfg %s: more than %d bytes; no report channel", report.ChannelFwCfgName, maxChannelName)
		return ""
	}
	if err != nil {
		if data, err = b.o.System.ReadFwCfg(report.ChannelFwCfgName); err != nil {
			return ""
		}
	}
	if len(data) > maxChannelName {
		b.warnf("fw_cfg %s: more than %d bytes; no report channel", report.ChannelFwCfgName, maxChannelName)
		return ""
	}
	dev := strings.TrimSpace(string(data))
	if !filepath.IsAbs(dev) || strings.ContainsAny(dev, " \t\n") {
		b.warnf("fw_cfg %s: %q is not an absolute device path; no report channel", report.ChannelFwCfgName, dev)
		return ""
	}
	return dev
}

// maxChannelName bounds the report channel's name read from fw_cfg, which
// the host provides: a device path is a few dozen bytes.
const maxChannelName = 4096

// errTooLong says a bounded read found more than its bound.
var errTooLong = errors.New("longer than the bound")

// readBounded reads file, refusing one longer than max bytes without
// reading past max+1.
func readBounded(file string, max int) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(data) > max {
		return nil, errTooLong
	}
	return data, nil
}
