package report

// Selection records how /init chose GPU and accelerator driver versions: where
// the instance request came from, what it asked, every cached set considered
// with the rule that excluded it, and what was chosen. `kpreload plan` prints
// the same structure.
type Selection struct {
	// Source is where the request came from: cmdline, fw_cfg, seed, image,
	// default, or (applied after boot) user-data.
	Source string `json:"source"`
	// Origin says exactly where (the flags, the file).
	Origin string `json:"origin,omitempty"`
	// Notes say why sources tried before Source gave no request, where worth
	// knowing (user-data only cloud-init can read).
	Notes   []string         `json:"notes,omitempty"`
	Request SelectionRequest `json:"request"`
	// Kernel is the running kernel release the sets must be built for.
	Kernel string `json:"kernel"`
	// GPUs are the NVIDIA display/3D devices present.
	GPUs    []SelectionGPU    `json:"gpus,omitempty"`
	Drivers []SelectionDriver `json:"drivers"`
	// Warnings are mismatches that do not stop anything (gpu type/count, unchecked hardware).
	Warnings []string `json:"warnings,omitempty"`
	// Errors are request sources that were present but invalid (skipped).
	Errors []string `json:"errors,omitempty"`
	// Time is when the decision was taken (seconds since kernel start; 0 outside /init).
	Time float64 `json:"t,omitempty"`
	// MIG is the decision on the request's gpu.mig; nil when it asks none.
	MIG *SelectionMIG `json:"mig,omitempty"`
}

// SelectionMIG is what a gpu.mig request means for the GPUs present: one
// layout per GPU, or a refusal (never a boot failure: kpreload does not
// change MIG mode, the NVIDIA MIG manager applies the layout).
type SelectionMIG struct {
	Request string            `json:"request"`
	GPUs    []SelectionMIGGPU `json:"gpus,omitempty"`
	Refusal string            `json:"refusal,omitempty"`
}

// SelectionMIGGPU is one GPU's MIG layout.
type SelectionMIGGPU struct {
	Address string         `json:"address"`
	ID      string         `json:"id"`
	Model   string         `json:"model,omitempty"`
	Enabled bool           `json:"enabled"`
	Devices map[string]int `json:"devices,omitempty"`
}

// SelectionRequest is the instance request as /init understood it.
type SelectionRequest struct {
	Version string `json:"version"`
	CUDA    string `json:"cuda,omitempty"`
	// CUDACompat is "minor" when the instance accepts the CUDA family minimum.
	CUDACompat string `json:"cuda_compat,omitempty"`
	Flavor     string `json:"flavor"`
	GPUType    string `json:"gpu_type,omitempty"`
	GPUCount   int    `json:"gpu_count,omitempty"`
	// Sharing is the gpu.sharing request: "time-slicing" or "mps" with the
	// replicas per GPU, for the NVIDIA device plugin.
	Sharing         string `json:"sharing,omitempty"`
	SharingReplicas int    `json:"sharing_replicas,omitempty"`
	// MIG is the gpu.mig request ("all-1g.18gb").
	MIG string `json:"mig,omitempty"`
}

// SelectionGPU is one NVIDIA GPU present.
type SelectionGPU struct {
	Address   string `json:"address"`
	ID        string `json:"id"`        // "10de:2335"
	Subsystem string `json:"subsystem"` // "10de:18bf"
	Class     string `json:"class"`     // "0x030200"
	// Name is the chip's name from a cached supported-gpus.json, when one lists it.
	Name string `json:"name,omitempty"`
}

// SelectionDriver is the decision for one driver (all cached versions of it).
type SelectionDriver struct {
	Driver string `json:"driver"`
	// Requested is true when the instance request applies to this driver;
	// other drivers get the newest version that passes every other rule.
	Requested bool `json:"requested"`
	// Rule is the version rule applied: "exact 535.261.03", "branch 535", "latest".
	Rule string `json:"rule"`
	// Fallback says why the request's version was not applied: the image
	// holds no set of it, so the default rule (latest, flavour auto) was.
	Fallback   string               `json:"fallback,omitempty"`
	Candidates []SelectionCandidate `json:"candidates"`
	// Chosen is the set allowed to load; nil when none qualifies.
	Chosen *SelectionCandidate `json:"chosen,omitempty"`
	// Refusal says why nothing of this driver may load and what would work.
	Refusal string `json:"refusal,omitempty"`
	// Loaded is true when a module of the chosen set loaded (filled in by /init).
	Loaded bool `json:"loaded,omitempty"`
	// Active is true for the driver /init activated: /run/kpreload/ready names it.
	Active bool `json:"active,omitempty"`
	// Userspace is where /run/kpreload/driver points for the active driver, "" when
	// the image has no userspace for that version.
	Userspace string `json:"userspace,omitempty"`
	// DeviceNodes lists the device nodes /init made for it (NVIDIA).
	DeviceNodes []string `json:"device_nodes,omitempty"`
}

// SelectionCandidate is one cached set of a driver.
type SelectionCandidate struct {
	ID      string `json:"id"`
	Version string `json:"version"`
	Flavor  string `json:"flavor,omitempty"`
	// From is where the set is: initramfs, rootfs, or a cache directory.
	From string `json:"from"`
	// Excluded is the rule that excluded the set (vermagic, version, cuda,
	// hardware, flavor, supported-gpus, newer), "" when it qualified.
	Excluded string `json:"excluded,omitempty"`
	// Reason explains the exclusion.
	Reason string `json:"reason,omitempty"`
}
