package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/kpreload/kpreload/cmd/kpreload/cli"
	"github.com/kpreload/kpreload/kmodcache/remote"
)

// followFlags returns the flags the real `kpreload follow` command accepts,
// to parse the manifests' command lines with.
func followFlags(t *testing.T) *pflag.FlagSet {
	t.Helper()
	cmd, _, err := cli.NewRoot().Find([]string{"follow"})
	if err != nil || cmd.Name() != "follow" {
		t.Fatalf("kpreload has no follow command: %v", err)
	}
	return cmd.Flags()
}

// parseFollow parses a `kpreload follow` command line (without "follow")
// with the command's own flags, failing on a flag it does not accept, and
// returns the flags and the recipes named.
func parseFollow(t *testing.T, args []string) (*pflag.FlagSet, []string) {
	t.Helper()
	f := followFlags(t)
	f.SetOutput(new(bytes.Buffer))
	if err := f.Parse(args); err != nil {
		t.Fatalf("kpreload follow %s: %v", strings.Join(args, " "), err)
	}
	for _, r := range f.Args() {
		if _, err := os.Stat(filepath.Join("..", "recipes", r+".yaml")); err != nil {
			t.Errorf("recipe %s: %v", r, err)
		}
	}
	return f, f.Args()
}

// checkFollowRegistry checks the registry flags every follow command line
// needs: a valid --remote over TLS, a signing key.
func checkFollowRegistry(t *testing.T, f *pflag.FlagSet) {
	t.Helper()
	rem, _ := f.GetString("remote")
	if rem == "" {
		t.Error("no --remote: a cycle compares with and pushes to a registry")
	} else if _, err := remote.Parse(rem); err != nil {
		t.Errorf("--remote: %v", err)
	}
	if plain, _ := f.GetBool("plain-http"); plain {
		t.Error("--plain-http in a deployment")
	}
	if key, _ := f.GetString("sign"); key == "" {
		t.Error("no --sign: the cells pushed would be unsigned, and VMs trusting the team's key refuse them")
	}
}

// TestFollowCronJob decodes deploy/k8s/follow-cronjob.yaml strictly with
// Kubernetes' own batch/v1 CronJob type and checks that each cycle runs
// kpreload follow as an Indexed Job of --shards pods that never overlap,
// with the signing key, the trusted keys and the registry credentials
// mounted from where the arguments name them.
func TestFollowCronJob(t *testing.T) {
	b, err := os.ReadFile("k8s/follow-cronjob.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%d YAML documents, want 2: the state claim and the CronJob", len(docs))
	}
	var pvc corev1.PersistentVolumeClaim
	if err := k8syaml.UnmarshalStrict([]byte(docs[0]), &pvc); err != nil {
		t.Fatalf("follow-cronjob.yaml's first document is not a valid v1 PersistentVolumeClaim: %v", err)
	}
	if pvc.APIVersion != "v1" || pvc.Kind != "PersistentVolumeClaim" || pvc.Name == "" {
		t.Errorf("apiVersion/kind/name = %s/%s/%q", pvc.APIVersion, pvc.Kind, pvc.Name)
	}
	var cj batchv1.CronJob
	if err := k8syaml.UnmarshalStrict([]byte(docs[1]), &cj); err != nil {
		t.Fatalf("follow-cronjob.yaml is not a valid batch/v1 CronJob: %v", err)
	}
	if cj.APIVersion != "batch/v1" || cj.Kind != "CronJob" || cj.Name == "" {
		t.Errorf("apiVersion/kind/name = %s/%s/%q", cj.APIVersion, cj.Kind, cj.Name)
	}
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("concurrencyPolicy %q, want Forbid: two cycles would build and push the same cells at once", cj.Spec.ConcurrencyPolicy)
	}
	// The schedule, read by the parser Kubernetes' CronJob controller uses.
	sched, err := cron.ParseStandard(cj.Spec.Schedule)
	if err != nil {
		t.Fatalf("schedule %q: %v", cj.Spec.Schedule, err)
	}
	spec := cj.Spec.JobTemplate.Spec
	if spec.ActiveDeadlineSeconds == nil {
		t.Error("no activeDeadlineSeconds: a stuck cycle would hold back every later one (Forbid)")
	} else {
		// The shortest gap between two runs over a week of the schedule.
		gap := 7 * 24 * time.Hour
		at := sched.Next(time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC))
		for end := at.Add(7 * 24 * time.Hour); at.Before(end); {
			next := sched.Next(at)
			gap = min(gap, next.Sub(at))
			at = next
		}
		if d := time.Duration(*spec.ActiveDeadlineSeconds) * time.Second; d >= gap {
			t.Errorf("activeDeadlineSeconds %v is not under the schedule's gap %v: a stuck cycle makes the next one skip", d, gap)
		}
	}
	if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("completionMode = %v, want Indexed (Kubernetes then sets JOB_COMPLETION_INDEX)", spec.CompletionMode)
	}
	if spec.Completions == nil || spec.Parallelism == nil || *spec.Completions < 2 || *spec.Parallelism != *spec.Completions {
		t.Fatalf("completions %v, parallelism %v: want N >= 2 of each", spec.Completions, spec.Parallelism)
	}
	n := int(*spec.Completions)
	if spec.BackoffLimitPerIndex == nil || *spec.BackoffLimitPerIndex > 2 {
		t.Errorf("backoffLimitPerIndex %v, want 0..2: one index's failure would count against all, or retry without end", spec.BackoffLimitPerIndex)
	}
	pod := spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never (backoffLimitPerIndex and podFailurePolicy need it)", pod.RestartPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image == "" || len(c.Command) != 0 || len(c.Args) == 0 || c.Args[0] != "follow" {
		t.Fatalf("container image %q command %v args %v: want the builder image running kpreload follow", c.Image, c.Command, c.Args)
	}
	f, _ := parseFollow(t, c.Args[1:])
	if v, _ := f.GetInt("shards"); v != n {
		t.Errorf("--shards %d, want %d (the completions)", v, n)
	}
	if f.Changed("shard") {
		t.Error("--shard I/N in an Indexed Job: every pod would follow the same shard")
	}
	if v, _ := f.GetInt("new-exit-code"); v != 0 {
		t.Errorf("--new-exit-code %d: a cycle that pushed new cells would be a failed pod to Kubernetes, and retried", v)
	}
	checkFollowRegistry(t, f)

	// Every file the arguments name lies in a read-only volume that projects it.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name }) {
			t.Errorf("volume %s is not mounted", v.Name)
		}
	}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("mount %s has no volume", m.Name)
		}
	}
	// projected returns the volume holding path and whether it projects that file.
	projected := func(path string) (corev1.Volume, bool) {
		for _, m := range c.VolumeMounts {
			rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
			if !ok {
				continue
			}
			v := volumes[m.Name]
			var items []corev1.KeyToPath
			switch {
			case v.Secret != nil:
				items = v.Secret.Items
			case v.ConfigMap != nil:
				items = v.ConfigMap.Items
			default:
				return v, false
			}
			if !m.ReadOnly {
				t.Errorf("volume %s holding %s is mounted read-write", m.Name, path)
			}
			return v, slices.ContainsFunc(items, func(k corev1.KeyToPath) bool { return k.Path == rel })
		}
		return corev1.Volume{}, false
	}
	key, _ := f.GetString("sign")
	if v, ok := projected(key); !ok || v.Secret == nil {
		t.Errorf("--sign %s is not a file of a Secret volume", key)
	} else if m := v.Secret.DefaultMode; m == nil || *m&0o077 != 0 {
		t.Errorf("the signing key's Secret volume has mode %v, want 0400 or 0600", m)
	}
	trust, _ := f.GetStringArray("trust")
	if len(trust) == 0 {
		t.Error("no --trust: cells in the registry would be taken whoever signed them")
	}
	for _, p := range trust {
		if _, ok := projected(p); !ok {
			t.Errorf("--trust %s is not a file of a Secret or ConfigMap volume", p)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if dc := env["DOCKER_CONFIG"]; dc == "" {
		t.Error("DOCKER_CONFIG unset: the registry credentials are not found")
	} else if v, ok := projected(dc + "/config.json"); !ok || v.Secret == nil {
		t.Errorf("no Secret volume projects config.json at DOCKER_CONFIG=%s", dc)
	}
	// The caches persist between cycles on the claim, a directory per index:
	// the download cache holds the cycle lock, so shards sharing one would
	// stop each other, and the first-seen dates of the freshness table.
	var index []string // the variables holding the completion index
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.annotations['"+batchv1.JobCompletionIndexAnnotation+"']" {
			index = append(index, e.Name)
		}
	}
	subPaths := map[string]bool{}
	for _, dir := range []string{env["KPRELOAD_CACHE"], env["KPRELOAD_CACHE_DIR"]} {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir })
		if dir == "" || i < 0 || c.VolumeMounts[i].ReadOnly {
			t.Errorf("cache directory %q has no writable volume (KPRELOAD_CACHE and KPRELOAD_CACHE_DIR)", dir)
			continue
		}
		m := c.VolumeMounts[i]
		if v := volumes[m.Name]; v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != pvc.Name {
			t.Errorf("cache directory %s is not on the claim %s: every cycle would download everything again and forget when it first saw a package", dir, pvc.Name)
		}
		if !slices.ContainsFunc(index, func(name string) bool { return strings.Contains(m.SubPathExpr, "$("+name+")") }) {
			t.Errorf("cache directory %s: subPathExpr %q does not hold the completion index (env %v): the shards would share one lock", dir, m.SubPathExpr, index)
		}
		if subPaths[m.SubPathExpr] {
			t.Errorf("cache directory %s: subPathExpr %q is another cache's", dir, m.SubPathExpr)
		}
		subPaths[m.SubPathExpr] = true
	}
	if !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany) {
		t.Errorf("claim %s: access modes %v, want ReadWriteMany (the shards' pods run on several nodes)", pvc.Name, pvc.Spec.AccessModes)
	}
	if !slices.Contains(c.SecurityContext.Capabilities.Add, "SYS_ADMIN") || !slices.Contains(c.SecurityContext.Capabilities.Add, "SYS_CHROOT") {
		t.Errorf("capabilities %v: the trixie build root needs SYS_ADMIN and SYS_CHROOT", c.SecurityContext.Capabilities.Add)
	}
}

// workflowSchema compiles GitHub's workflow schema (SchemaStore's, vendored
// in testdata/).
func workflowSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("testdata/github-workflow.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "https://json.schemastore.org/github-workflow.json"
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readWorkflow validates a workflow file against GitHub's schema and
// returns it as JSON-like values. YAML 1.2 (yaml.v3) reads it, as GitHub
// does: "on" is a key, not true.
func readWorkflow(t *testing.T, s *jsonschema.Schema, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	// Through JSON, so the validator sees JSON's types.
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		t.Fatalf("%s does not follow GitHub's workflow schema: %#v", path, err)
	}
	return inst
}

// TestWorkflowSchema validates every CI example against GitHub's workflow
// schema, and holds the check to failing on a misspelt key.
func TestWorkflowSchema(t *testing.T) {
	s := workflowSchema(t)
	files, err := filepath.Glob("ci/github-actions-*.yml")
	if err != nil || len(files) < 2 {
		t.Fatalf("workflows %v (%v): want the matrix and the follow workflow", files, err)
	}
	for _, p := range files {
		readWorkflow(t, s, p)
	}
	bad := map[string]any{"name": "x", "on": "push", "jobs": map[string]any{"j": map[string]any{"runs-on": "ubuntu-latest", "step": []any{}}}}
	if err := s.Validate(bad); err == nil {
		t.Error("the schema takes a job with \"step\" for \"steps\"")
	}
}

var ghExpr = regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`)

// TestFollowWorkflow checks the nightly follow workflow: a matrix of shards
// 1..SHARDS, cycles that never overlap, and a follow step whose command line,
// parsed as the shell parses it, passes follow's own flags: --shard I/SHARDS,
// a registry, a signing key, and exit status 2 (new cells) taken as success.
func TestFollowWorkflow(t *testing.T) {
	const path = "ci/github-actions-follow.yml"
	readWorkflow(t, workflowSchema(t), path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var wf struct {
		On          map[string]any    `yaml:"on"`
		Env         map[string]string `yaml:"env"`
		Concurrency struct {
			Group            string `yaml:"group"`
			CancelInProgress bool   `yaml:"cancel-in-progress"`
		} `yaml:"concurrency"`
		Jobs map[string]struct {
			Strategy struct {
				Matrix struct {
					Shard []int `yaml:"shard"`
				} `yaml:"matrix"`
			} `yaml:"strategy"`
			Steps []struct {
				Run string `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatal(err)
	}
	if _, ok := wf.On["schedule"]; !ok {
		t.Error("no schedule: the workflow is to run nightly")
	}
	if wf.Concurrency.Group == "" || wf.Concurrency.CancelInProgress {
		t.Errorf("concurrency %+v: want a group without cancel-in-progress (two cycles at once, or one killed mid-push)", wf.Concurrency)
	}
	n, err := strconv.Atoi(wf.Env["SHARDS"])
	if err != nil {
		t.Fatalf("env SHARDS = %q", wf.Env["SHARDS"])
	}
	job, ok := wf.Jobs["follow"]
	if !ok {
		t.Fatal("no follow job")
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	if got := job.Strategy.Matrix.Shard; !slices.Equal(got, want) {
		t.Errorf("matrix shard = %v, want %v", got, want)
	}

	var calls int
	for _, step := range job.Steps {
		// GitHub replaces its expressions before the shell runs: here the
		// second shard, anything else a placeholder.
		script := ghExpr.ReplaceAllStringFunc(step.Run, func(e string) string {
			switch ghExpr.FindStringSubmatch(e)[1] {
			case "matrix.shard":
				return "2"
			case "env.SHARDS":
				return wf.Env["SHARDS"]
			}
			return "expr"
		})
		file, err := syntax.NewParser().Parse(strings.NewReader(script), "run")
		if err != nil {
			t.Fatalf("step %q: %v", step.Run, err)
		}
		cfg := &expand.Config{Env: expand.ListEnviron(
			"REMOTE="+ghExpr.ReplaceAllString(wf.Env["REMOTE"], "owner"), "RUNNER_TEMP=/runner/temp")}
		syntax.Walk(file, func(node syntax.Node) bool {
			bin, isBin := node.(*syntax.BinaryCmd)
			var call *syntax.CallExpr
			if isBin {
				call, _ = bin.X.Cmd.(*syntax.CallExpr)
			} else {
				call, _ = node.(*syntax.CallExpr)
			}
			if call == nil {
				return true
			}
			argv, err := expand.Fields(cfg, call.Args...)
			if err != nil || len(argv) < 2 || argv[0] != "kpreload" || argv[1] != "follow" {
				return true
			}
			calls++
			f, _ := parseFollow(t, argv[2:])
			if v, _ := f.GetString("shard"); v != "2/"+wf.Env["SHARDS"] {
				t.Errorf("--shard %q, want ${{ matrix.shard }}/${{ env.SHARDS }}", v)
			}
			checkFollowRegistry(t, f)
			code, _ := f.GetInt("new-exit-code")
			ok := code == 0 || isBin && bin.Op == syntax.OrStmt && strings.Contains(script[bin.Y.Pos().Offset():bin.Y.End().Offset()], "[ $? -eq 2 ]")
			if !ok {
				t.Errorf("exit status 2 (new cells pushed) fails the job: want `|| [ $? -eq 2 ]` or --new-exit-code 0: %s", step.Run)
			}
			return false
		})
	}
	if calls != 1 {
		t.Errorf("%d kpreload follow commands in the follow job, want 1", calls)
	}
}
