package report

// ChannelFwCfgName is the QEMU fw_cfg item through which a boot harness
// names the report channel (a device such as /dev/ttyS1) to /init when the
// kernel command line carries no kpreload.report=: images keep the command
// line they were built with, and the harness still gets its report.
const ChannelFwCfgName = "opt/kpreload/report"
