//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Shared
//go:generate go tool packer-sdc struct-markdown

package pkrcfg

import (
	"cmp"
	"fmt"
	"os"

	"github.com/hashicorp/packer-plugin-sdk/template/config"

	"github.com/kpreload/kpreload/builder/image"
	"github.com/kpreload/kpreload/builder/image/stage"
	"github.com/kpreload/kpreload/builder/recipe"
	"github.com/kpreload/kpreload/internal/layout"
	"github.com/kpreload/kpreload/kmodcache/cellsign"
	"github.com/kpreload/kpreload/kmodcache/remote"
)

// Shared is the configuration the kpreload builder and provisioner share
// (what drivers go in, where they come from, kpreload's own files); both
// embed it with `mapstructure:",squash"`.
type Shared struct {
	// The kernel releases (`uname -r`) to provide drivers for, such as
	// `6.1.0-56-cloud-amd64`. The builder installs them into the image, the
	// first one the default boot entry; the provisioner's target must have
	// them installed (`/lib/modules/<release>`). Each must be in the kernel
	// matrix of every recipe in `recipes`.
	Kernels []string `mapstructure:"kernels" required:"true"`
	// The drivers: recipe names (the `name:` of a recipe in `recipes_dir`,
	// such as `testdriver` or `nvidia-535`) or paths to recipe YAML files. May
	// be empty for kpreload's initramfs with no extra driver.
	Recipes []string `mapstructure:"recipes"`
	// The directory recipe names are looked up in. Defaults to `recipes` in the
	// directory Packer runs in; templates usually set `"${path.root}/../recipes"`.
	RecipesDir string `mapstructure:"recipes_dir"`
	// The kpreload module cache the driver builds are read from (and added to
	// when `build_missing` or `remote` is on). Defaults to
	// `$KPRELOAD_CACHE_DIR`, else `/var/lib/kpreload/cache`.
	CacheDir string `mapstructure:"cache_dir"`
	// Where downloaded packages and unpacked kernels are kept between builds.
	// Defaults to `$KPRELOAD_CACHE`, else `/var/cache/kpreload`.
	DownloadDir string `mapstructure:"download_dir"`
	// Build the driver for every kernel that the cache has no build of, with the
	// real dkms on the machine running Packer (minutes per kernel for a GPU
	// driver). When false, a missing build is an error that lists what the
	// cache holds. Defaults to true.
	BuildMissing config.Trilean `mapstructure:"build_missing"`
	// A remote module cache: an OCI registry repository, `oci://HOST[:PORT]/REPO`
	// (ECR, GAR, GHCR, Harbor, a local registry). Cells the module cache lacks
	// are pulled from it by their content keys (exactly the cells the kernels
	// and recipes need, every blob verified); with `build_missing`, cells it
	// lacks too are built and pushed to it. Credentials come from the Docker
	// config and its credential helpers (`docker login`).
	Remote string `mapstructure:"remote"`
	// Talk HTTP, not HTTPS, to the `remote` registry: a local registry only.
	PlainHTTP bool `mapstructure:"plain_http"`
	// Take only cells from `remote` signed by one of these Ed25519 public keys
	// (PEM files; `kpreload cache keygen`): unsigned and foreign-signed cells
	// are refused, naming the key.
	RemoteTrust []string `mapstructure:"remote_trust"`
	// Sign the cells `build_missing` pushes to `remote` with this Ed25519
	// private key (PEM file).
	RemoteSign string `mapstructure:"remote_sign"`
	// Take cells from `remote` unsigned, on purpose: without it, `remote`
	// needs `remote_trust`. Every cell taken unsigned is reported.
	AllowUnsigned bool `mapstructure:"allow_unsigned"`
	// Put the driver sets into each kpreload initramfs too, with a complete
	// index: `/init` then chooses and loads the drivers while it finds the root
	// (the early decision) instead of after mounting it. The initramfs grows
	// by the sets; `/etc/kpreload/early-drivers` marks the root, so the kernel
	// install hook keeps building it this way.
	EarlyDrivers bool `mapstructure:"early_drivers"`
	// An instance YAML file installed as `/etc/kpreload/instance.yaml`: the
	// driver request `/init` uses when the kernel command line and QEMU's
	// fw_cfg carry none.
	InstanceFile string `mapstructure:"instance_file"`
	// A registry configuration file for the kernel hook (`remote`,
	// `plain_http`, `credentials`, `trust`, `timeout`): installed at
	// `/etc/kpreload/remote.yaml` with the keys and credentials it names, so
	// that a kernel installed later gets its driver cells from the registry,
	// verified against the trusted keys.
	RemoteConfig string `mapstructure:"remote_config"`
	// The kernel command line of kpreload's boot entries, one line. The
	// builder adds it after `root=UUID=<root> rw` (systemd-boot) or makes it
	// GRUB_CMDLINE_LINUX (grub), such as `console=ttyS0
	// kpreload.report=/dev/ttyS1`. The provisioner writes it to
	// `/etc/kpreload/cmdline` for the systemd-boot entries kpreload writes,
	// which without it take the target's running command line; GRUB entries
	// use GRUB_CMDLINE_LINUX from the target's `/etc/default/grub`.
	KernelCmdline string `mapstructure:"kernel_cmdline"`
	// A static build of the kpreload CLI (`make build` makes `bin/kpreload`),
	// installed for the kernel install hook. Defaults to `kpreload` next to
	// the plugin binary, else `bin/kpreload` in the directory Packer runs in.
	KpreloadBinary string `mapstructure:"kpreload_binary"`
	// The static `/init` program (`make build` makes `bin/kpreload-init`).
	// Defaults to `kpreload-init` next to the plugin binary, else
	// `bin/kpreload-init` in the directory Packer runs in.
	InitBinary string `mapstructure:"init_binary"`

	// recipes are the loaded Recipes, in order.
	recipes []*recipe.Recipe
	// remote is the opened Remote, or nil.
	remote *remote.Remote
	// env is the plugin's environment (SetEnv).
	env Env
}

// Env is what the plugin's environment says, read by its command
// (cmd/packer-plugin-kpreload) and handed to the builder and the
// provisioner (SetEnv): the packages read no environment themselves.
type Env struct {
	// DownloadDir is $KPRELOAD_CACHE: download_dir's default when set.
	DownloadDir string
	// CacheDir is $KPRELOAD_CACHE_DIR: cache_dir's default when set.
	CacheDir string
	// DockerConfig is the Docker config file the remote's credentials are
	// read from (remote.DockerConfigPath of $DOCKER_CONFIG and $HOME); ""
	// asks the registry anonymously.
	DockerConfig string
}

// SetEnv gives Prepare the plugin's environment.
func (s *Shared) SetEnv(e Env) { s.env = e }

// Prepare fills in the shared fields' defaults and checks them: the recipes
// load, every kernel is in every recipe's matrix, the remote opens with its
// keys, an instance file that is there reads as instance YAML (a missing one
// is left to the caller's path checks), and the cache directory can be
// written when builds or pulls add to it. It returns every problem found.
func (s *Shared) Prepare() []error {
	if s.RecipesDir == "" {
		// ./recipes in a checkout, else the packaged recipes (one decider:
		// internal/layout); neither there leaves ./recipes for the error.
		s.RecipesDir = "recipes"
		if d, err := layout.RecipesDir(); err == nil {
			s.RecipesDir = d
		}
	}
	if s.CacheDir == "" {
		s.CacheDir = cmp.Or(s.env.CacheDir, image.DefaultCacheDir())
	}
	if s.DownloadDir == "" {
		s.DownloadDir = cmp.Or(s.env.DownloadDir, image.DefaultDownloadDir())
	}
	if s.KpreloadBinary == "" {
		s.KpreloadBinary = DefaultBinary("kpreload")
	}
	if s.InitBinary == "" {
		s.InitBinary = DefaultBinary("kpreload-init")
	}

	var errs []error
	s.recipes, errs = LoadRecipes(s.RecipesDir, s.Recipes)
	errs = append(errs, CheckKernels(s.Kernels, s.recipes, s.DownloadDir)...)
	if s.Remote != "" {
		var err error
		if len(s.RemoteTrust) == 0 && !s.AllowUnsigned {
			errs = append(errs, fmt.Errorf("remote %s without remote_trust: the image's drivers would be taken from the registry unsigned; list the builders' public keys in remote_trust, or set allow_unsigned = true to take unsigned cells on purpose", s.Remote))
		}
		o := remote.Options{PlainHTTP: s.PlainHTTP, DockerConfig: s.env.DockerConfig}
		if len(s.RemoteTrust) > 0 {
			if o.Trust, err = cellsign.LoadTrust(s.RemoteTrust...); err != nil {
				errs = append(errs, fmt.Errorf("remote_trust: %w", err))
			}
		}
		if s.RemoteSign != "" {
			if o.Signer, err = cellsign.LoadSigner(s.RemoteSign); err != nil {
				errs = append(errs, fmt.Errorf("remote_sign: %w", err))
			}
		}
		if s.remote, err = remote.Open(s.Remote, o); err != nil {
			errs = append(errs, fmt.Errorf("remote: %w", err))
		}
	} else if s.PlainHTTP || len(s.RemoteTrust) > 0 || s.RemoteSign != "" || s.AllowUnsigned {
		errs = append(errs, fmt.Errorf("plain_http, remote_trust, remote_sign and allow_unsigned are set but remote is not"))
	}
	if s.InstanceFile != "" {
		if st, err := os.Stat(s.InstanceFile); err == nil && st.IsDir() {
			errs = append(errs, fmt.Errorf("instance_file: %s is a directory, want an instance YAML file", s.InstanceFile))
		} else if err == nil {
			if err := CheckInstance(s.InstanceFile); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if s.BuildsMissing() || s.Remote != "" {
		if err := Creatable(s.CacheDir); err != nil {
			errs = append(errs, fmt.Errorf("cache_dir (written to, since build_missing or remote is on): %w", err))
		}
	}
	return errs
}

// BuildsMissing reports whether build_missing is on (its default).
func (s *Shared) BuildsMissing() bool { return s.BuildMissing != config.TriFalse }

// LoadedRecipes returns the recipes Prepare loaded, in order.
func (s *Shared) LoadedRecipes() []*recipe.Recipe { return s.recipes }

// OpenedRemote returns the registry Prepare opened, or nil without `remote`.
func (s *Shared) OpenedRemote() *remote.Remote { return s.remote }

// StageOptions returns what the builder and the provisioner both hand
// stage: the recipes Prepare loaded, the module cache, whether missing cells
// are built, the registry Prepare opened, the downloads directory, the
// kpreload binaries, the instance file, the kernel hook's registry
// configuration and the early drivers. The kernels, the command line and the
// progress are each plugin's to set.
func (s *Shared) StageOptions() stage.Options {
	return stage.Options{
		Recipes:        s.LoadedRecipes(),
		CacheDir:       s.CacheDir,
		BuildMissing:   s.BuildsMissing(),
		Remote:         s.OpenedRemote(),
		EarlyDrivers:   s.EarlyDrivers,
		DownloadDir:    s.DownloadDir,
		KpreloadBinary: s.KpreloadBinary,
		InitBinary:     s.InitBinary,
		Instance:       s.InstanceFile,
		RemoteConfig:   s.RemoteConfig,
	}
}
