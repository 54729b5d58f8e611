package pid1

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/kpreload/kpreload/live/report"
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
	data, err := os.ReadFile(b.sysPath("/sys/firmware/qemu_fw_cfg/by_name/" + report.ChannelFwCfgName + "/raw"))
	if err != nil {
		if data, err = b.o.System.ReadFwCfg(report.ChannelFwCfgName); err != nil {
			return ""
		}
	}
	dev := strings.TrimSpace(string(data))
	if !filepath.IsAbs(dev) || strings.ContainsAny(dev, " \t\n") {
		b.warnf("fw_cfg %s: %q is not an absolute device path; no report channel", report.ChannelFwCfgName, dev)
		return ""
	}
	return dev
}
