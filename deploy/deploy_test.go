// Package deploy holds examples of running kpreload's kernel matrix on
// engines teams already have: a Kubernetes Indexed Job (k8s/) and a CI
// matrix (ci/). Its test checks they are complete and agree with the CLI.
package deploy

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kpreload/kpreload/kmodcache/remote"
)

// flagValue returns the value of --name=V or --name V in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// TestMatrixJob decodes deploy/k8s/matrix-job.yaml with Kubernetes' own types
// (strictly: an unknown or misspelt field fails) and checks that it is a
// complete Indexed Job for kpreload build --shards.
func TestMatrixJob(t *testing.T) {
	b, err := os.ReadFile("k8s/matrix-job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := yaml.UnmarshalStrict(b, &job); err != nil {
		t.Fatalf("matrix-job.yaml is not a valid batch/v1 Job: %v", err)
	}
	if job.APIVersion != "batch/v1" || job.Kind != "Job" || job.Name == "" {
		t.Errorf("apiVersion/kind/name = %s/%s/%q", job.APIVersion, job.Kind, job.Name)
	}
	spec := job.Spec
	if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("completionMode = %v, want Indexed (Kubernetes then sets JOB_COMPLETION_INDEX)", spec.CompletionMode)
	}
	if spec.Completions == nil || spec.Parallelism == nil || *spec.Completions < 2 || *spec.Parallelism != *spec.Completions {
		t.Fatalf("completions %v, parallelism %v: want N >= 2 of each", spec.Completions, spec.Parallelism)
	}
	n := int(*spec.Completions)
	if spec.BackoffLimitPerIndex == nil {
		t.Error("backoffLimitPerIndex unset: one index's failure would count against all")
	}
	pod := spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never (podFailurePolicy needs it)", pod.RestartPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image == "" || len(c.Args) == 0 || c.Args[0] != "build" {
		t.Fatalf("container image %q args %v: want kpreload build", c.Image, c.Args)
	}
	if v, ok := flagValue(c.Args, "shards"); !ok || v != strconv.Itoa(n) {
		t.Errorf("--shards %q, want %d (the completions)", v, n)
	}
	if _, ok := flagValue(c.Args, "shard"); ok {
		t.Error("--shard I/N in an Indexed Job: every pod would build the same shard")
	}
	rem, ok := flagValue(c.Args, "remote")
	if !ok {
		t.Fatal("no --remote: the shards' cells would stay in their pods")
	}
	if _, err := remote.Parse(rem); err != nil {
		t.Errorf("--remote: %v", err)
	}
	if _, ok := flagValue(c.Args, "plain-http"); ok || slices.Contains(c.Args, "--plain-http") {
		t.Error("--plain-http in a cluster manifest")
	}
	var recipes []string
	for i := 1; i < len(c.Args); i++ {
		a := c.Args[i]
		if strings.HasPrefix(a, "-") {
			if !strings.Contains(a, "=") && (a == "--remote" || a == "--shards" || a == "--recipes") {
				i++
			}
			continue
		}
		recipes = append(recipes, a)
	}
	for _, r := range recipes {
		if _, err := os.Stat("../recipes/" + r + ".yaml"); err != nil {
			t.Errorf("recipe %s: %v", r, err)
		}
	}
	if len(recipes) == 0 {
		t.Error("no recipes in the job's arguments")
	}

	// The registry credentials: a secret volume mounted where DOCKER_CONFIG points.
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	dockerConfig := env["DOCKER_CONFIG"]
	if dockerConfig == "" {
		t.Fatal("DOCKER_CONFIG unset: the registry credentials are not found")
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	var secret *corev1.SecretVolumeSource
	for _, v := range pod.Volumes {
		if _, ok := mounts[v.Name]; !ok {
			t.Errorf("volume %s is not mounted", v.Name)
		}
		if v.Secret != nil && mounts[v.Name].MountPath == dockerConfig {
			secret = v.Secret
			if !mounts[v.Name].ReadOnly {
				t.Errorf("credentials volume %s is mounted read-write", v.Name)
			}
		}
	}
	for name := range mounts {
		if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == name }) {
			t.Errorf("mount %s has no volume", name)
		}
	}
	if secret == nil || secret.SecretName == "" {
		t.Fatalf("no secret volume mounted at DOCKER_CONFIG=%s", dockerConfig)
	}
	if !slices.ContainsFunc(secret.Items, func(k corev1.KeyToPath) bool { return k.Path == "config.json" }) {
		t.Errorf("secret %s does not project config.json: %+v", secret.SecretName, secret.Items)
	}
	for _, dir := range []string{env["KPRELOAD_CACHE"], env["KPRELOAD_CACHE_DIR"]} {
		if dir == "" || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir }) {
			t.Errorf("cache directory %q has no volume (KPRELOAD_CACHE and KPRELOAD_CACHE_DIR)", dir)
		}
	}

	// Exit status 3 (only compile failures, recorded) fails its index without a retry.
	p := spec.PodFailurePolicy
	if p == nil || !slices.ContainsFunc(p.Rules, func(r batchv1.PodFailurePolicyRule) bool {
		return r.Action == batchv1.PodFailurePolicyActionFailIndex && r.OnExitCodes != nil && slices.Contains(r.OnExitCodes.Values, 3)
	}) {
		t.Error("no podFailurePolicy rule failing the index on exit status 3 (kpreload's ExitCellsFailed)")
	}
}

// TestCIMatrix checks the CI example: its shard list is 1..SHARDS and every
// job passes --shard I/SHARDS and --remote.
func TestCIMatrix(t *testing.T) {
	b, err := os.ReadFile("ci/github-actions-matrix.yml")
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		Env  map[string]string `json:"env"`
		Jobs map[string]struct {
			Strategy struct {
				Matrix struct {
					Shard []int `json:"shard"`
				} `json:"matrix"`
			} `json:"strategy"`
			Steps []struct {
				Run string `json:"run"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(wf.Env["SHARDS"])
	if err != nil {
		t.Fatalf("env SHARDS = %q", wf.Env["SHARDS"])
	}
	cells, ok := wf.Jobs["cells"]
	if !ok {
		t.Fatal("no cells job")
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	if got := cells.Strategy.Matrix.Shard; !slices.Equal(got, want) {
		t.Errorf("matrix shard = %v, want %v", got, want)
	}
	var build string
	for _, s := range cells.Steps {
		if strings.Contains(s.Run, "kpreload build") {
			build = s.Run
		}
	}
	for _, w := range []string{"--shard ${{ matrix.shard }}/${{ env.SHARDS }}", "--remote"} {
		if !strings.Contains(build, w) {
			t.Errorf("the build step lacks %q: %s", w, build)
		}
	}
}
