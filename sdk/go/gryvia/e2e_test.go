package gryvia_test

// End-to-end tests against a real API server with Gryvia's CRDs installed (testenv/). They run
// when GRYVIA_TESTENV_KUBECONFIG names its kubeconfig and skip, saying why, when it does not;
// with GRYVIA_E2E=1 a missing or unreachable server fails them instead. No Gryvia operator
// needs to run: the tests write status themselves through the status subresource.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gryvia/gryvia/sdk/go/api/v1alpha1"
	"github.com/gryvia/gryvia/sdk/go/gryvia"
	"github.com/gryvia/gryvia/sdk/go/internal/fixtures"
	"github.com/gryvia/gryvia/sdk/go/internal/jsondiff"
)

// fixtureDir holds the example and invalid objects the Rust tests use too.
const fixtureDir = "../../../gryvia-types/tests/data"

// testenvConfig returns the rest.Config of testenv's API server, or skips (fails with
// GRYVIA_E2E=1) when there is none to reach.
func testenvConfig(t *testing.T) *rest.Config {
	t.Helper()
	required := os.Getenv("GRYVIA_E2E") == "1"
	unavailable := func(reason string) {
		t.Helper()
		if required {
			t.Fatalf("GRYVIA_E2E=1 but %s", reason)
		}
		t.Skipf("e2e skipped: %s (set GRYVIA_TESTENV_KUBECONFIG to testenv's kubeconfig to run it, GRYVIA_E2E=1 to require it)", reason)
	}
	path := os.Getenv("GRYVIA_TESTENV_KUBECONFIG")
	if path == "" {
		unavailable("GRYVIA_TESTENV_KUBECONFIG is unset")
	}
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		unavailable("kubeconfig " + path + " is unusable: " + err.Error())
	}
	config.QPS, config.Burst = 50, 100
	probe := rest.CopyConfig(config)
	probe.Timeout = 10 * time.Second
	disco, err := discovery.NewDiscoveryClientForConfig(probe)
	if err != nil {
		unavailable("discovery client: " + err.Error())
	}
	if _, err := disco.ServerVersion(); err != nil {
		unavailable("the API server of " + path + " is unreachable: " + err.Error())
	}
	if _, err := disco.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String()); err != nil {
		unavailable("the API server does not serve " + v1alpha1.GroupVersion.String() + " (CRDs not installed?): " + err.Error())
	}
	return config
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("random suffix: %v", err)
	}
	return hex.EncodeToString(b)
}

// e2eEnv is what the subtests share: the client, a namespace of their own and a suffix that
// makes cluster-scoped names unique.
type e2eEnv struct {
	c         *gryvia.Client
	namespace string
	suffix    string
}

// deleteOnCleanup deletes obj when the test ends, passed or failed; a missing object is fine.
func (e *e2eEnv) deleteOnCleanup(t *testing.T, obj client.Object) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete %T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
		}
	})
}

func (e *e2eEnv) newJob(name string) *v1alpha1.GryviaAIJob {
	gpus, priority := int32(1), int32(70)
	return &v1alpha1.GryviaAIJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.namespace, Name: name, Labels: map[string]string{"app": "go-sdk-e2e"}},
		Spec: v1alpha1.GryviaAIJobSpec{
			Image:    "ghcr.io/example/train:1.0",
			Command:  []string{"python", "train.py"},
			GPUs:     &gpus,
			Priority: &priority,
			Env:      []v1alpha1.GryviaAIJobSpecEnv{{Name: "EPOCHS", Value: ptr("10")}},
			Storage:  &v1alpha1.GryviaAIJobSpecStorage{Size: resource.MustParse("10Gi")},
		},
	}
}

// submit creates a job and deletes it when the test ends.
func (e *e2eEnv) submit(t *testing.T, ctx context.Context, name string) *v1alpha1.GryviaAIJob {
	t.Helper()
	job := e.newJob(name)
	if err := e.c.SubmitJob(ctx, job); err != nil {
		t.Fatalf("submit job %s: %v", name, err)
	}
	e.deleteOnCleanup(t, job)
	return job
}

// setStatus writes the job's status through the status subresource, retrying on conflicts.
func (e *e2eEnv) setStatus(ctx context.Context, name string, phase v1alpha1.GryviaAIJobStatusPhase, message string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		job, err := e.c.GetJob(ctx, e.namespace, name)
		if err != nil {
			return err
		}
		job.Status = &v1alpha1.GryviaAIJobStatus{Phase: &phase}
		if message != "" {
			job.Status.Message = &message
		}
		return e.c.Status().Update(ctx, job)
	})
}

func TestE2EAgainstTestenv(t *testing.T) {
	config := testenvConfig(t)
	c, err := gryvia.New(config)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	env := &e2eEnv{c: c, suffix: randomSuffix(t)}
	env.namespace = "go-sdk-e2e-" + env.suffix
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: env.namespace}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace %s: %v", env.namespace, err)
	}
	env.deleteOnCleanup(t, ns)

	t.Run("a tenant is created, read back and listed", func(t *testing.T) {
		name := "go-sdk-e2e-" + env.suffix
		concurrent := int32(8)
		tenant := &v1alpha1.GryviaTenant{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.GryviaTenantSpec{
				DisplayName:   "Go SDK e2e",
				Members:       []v1alpha1.GryviaTenantSpecMember{{Username: "alice", Role: v1alpha1.GryviaTenantSpecMemberRoleAdmin}},
				Quotas:        &v1alpha1.GryviaTenantSpecQuotas{ConcurrentGPUs: &concurrent},
				StorageQuotas: map[string]resource.Quantity{"datasets": resource.MustParse("100Ti")},
			},
		}
		if err := c.Create(ctx, tenant); err != nil {
			t.Fatalf("create tenant: %v", err)
		}
		env.deleteOnCleanup(t, tenant)

		got := &v1alpha1.GryviaTenant{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, got); err != nil {
			t.Fatalf("get tenant: %v", err)
		}
		if got.Spec.DisplayName != "Go SDK e2e" || len(got.Spec.Members) != 1 || got.Spec.Members[0].Role != v1alpha1.GryviaTenantSpecMemberRoleAdmin ||
			*got.Spec.Quotas.ConcurrentGPUs != 8 || !got.Spec.StorageQuotas["datasets"].Equal(resource.MustParse("100Ti")) {
			t.Errorf("tenant read back differs: %+v", got.Spec)
		}
		tenants, err := c.ListTenants(ctx)
		if err != nil {
			t.Fatalf("list tenants: %v", err)
		}
		found := false
		for _, item := range tenants {
			found = found || item.Name == name
		}
		if !found {
			t.Errorf("ListTenants (%d tenants) does not include %s", len(tenants), name)
		}
	})

	t.Run("a submitted job is read back with the server's defaults and listed", func(t *testing.T) {
		job := env.submit(t, ctx, "defaults")
		got, err := c.GetJob(ctx, env.namespace, "defaults")
		if err != nil {
			t.Fatalf("get job: %v", err)
		}
		if got.UID == "" || got.UID != job.UID {
			t.Errorf("job UID %q, SubmitJob saw %q", got.UID, job.UID)
		}
		// retryLimit and replicas are unset in the request; the CRD defaults them.
		if got.Spec.RetryLimit == nil || *got.Spec.RetryLimit != 3 || got.Spec.Replicas == nil || *got.Spec.Replicas != 1 {
			t.Errorf("server defaults missing: retryLimit %v, replicas %v", got.Spec.RetryLimit, got.Spec.Replicas)
		}
		if got.Spec.Storage.Size.String() != "10Gi" || got.Spec.Env[0].Value == nil || *got.Spec.Env[0].Value != "10" {
			t.Errorf("spec read back differs: storage %v, env %+v", got.Spec.Storage, got.Spec.Env)
		}
		list := &v1alpha1.GryviaAIJobList{}
		if err := c.List(ctx, list, client.InNamespace(env.namespace), client.MatchingLabels{"app": "go-sdk-e2e"}); err != nil {
			t.Fatalf("list jobs: %v", err)
		}
		found := false
		for _, item := range list.Items {
			found = found || item.Name == "defaults"
		}
		if !found {
			t.Errorf("the job list of %s (%d jobs) lacks the job", env.namespace, len(list.Items))
		}
	})

	t.Run("a watch opened before an update sees MODIFIED events for spec and status", func(t *testing.T) {
		job := env.submit(t, ctx, "watched")
		w, err := c.Watch(ctx, &v1alpha1.GryviaAIJobList{},
			&client.ListOptions{Namespace: env.namespace, Raw: &metav1.ListOptions{ResourceVersion: job.ResourceVersion}})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Stop()

		patch := client.MergeFrom(job.DeepCopy())
		job.Labels["stage"] = "labelled"
		if err := c.Patch(ctx, job, patch); err != nil {
			t.Fatalf("patch labels: %v", err)
		}
		awaitModified(t, w, "watched", func(j *v1alpha1.GryviaAIJob) bool { return j.Labels["stage"] == "labelled" })

		if err := env.setStatus(ctx, "watched", v1alpha1.GryviaAIJobStatusPhaseRunning, ""); err != nil {
			t.Fatalf("set status: %v", err)
		}
		awaitModified(t, w, "watched", func(j *v1alpha1.GryviaAIJob) bool {
			return j.Status != nil && j.Status.Phase != nil && *j.Status.Phase == v1alpha1.GryviaAIJobStatusPhaseRunning
		})
	})

	t.Run("WaitForJob returns a job whose status turns Succeeded while it waits", func(t *testing.T) {
		env.submit(t, ctx, "succeeds")
		type result struct {
			job *v1alpha1.GryviaAIJob
			err error
		}
		done := make(chan result, 1)
		go func() {
			job, err := c.WaitForJob(ctx, env.namespace, "succeeds", time.Minute)
			done <- result{job, err}
		}()
		for _, phase := range []v1alpha1.GryviaAIJobStatusPhase{v1alpha1.GryviaAIJobStatusPhaseRunning, v1alpha1.GryviaAIJobStatusPhaseSucceeded} {
			if err := env.setStatus(ctx, "succeeds", phase, ""); err != nil {
				t.Fatalf("set phase %s: %v", phase, err)
			}
		}
		r := <-done
		if r.err != nil {
			t.Fatalf("wait: %v", r.err)
		}
		if *r.job.Status.Phase != v1alpha1.GryviaAIJobStatusPhaseSucceeded {
			t.Fatalf("WaitForJob returned phase %s", *r.job.Status.Phase)
		}
	})

	t.Run("WaitForJob reports a Failed job by name and phase", func(t *testing.T) {
		env.submit(t, ctx, "fails")
		if err := env.setStatus(ctx, "fails", v1alpha1.GryviaAIJobStatusPhaseFailed, "worker 0 was OOMKilled"); err != nil {
			t.Fatalf("set status: %v", err)
		}
		_, err := c.WaitForJob(ctx, env.namespace, "fails", time.Minute)
		var failed *gryvia.JobFailedError
		if !errors.As(err, &failed) {
			t.Fatalf("error = %v, want a *JobFailedError", err)
		}
		want := "job " + env.namespace + "/fails failed: phase Failed: worker 0 was OOMKilled"
		if err.Error() != want {
			t.Errorf("error = %q, want %q", err, want)
		}
	})

	t.Run("WaitForJob times out on a job that does not progress", func(t *testing.T) {
		env.submit(t, ctx, "stuck")
		_, err := c.WaitForJob(ctx, env.namespace, "stuck", 2*time.Second)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), env.namespace+"/stuck") {
			t.Fatalf("error = %v, want a deadline error naming the job", err)
		}
	})

	t.Run("the API server rejects invalid jobs naming the field", func(t *testing.T) {
		cases := map[string]struct {
			edit func(*v1alpha1.GryviaAIJob)
			want string
		}{
			"priority above 100": {func(j *v1alpha1.GryviaAIJob) { j.Spec.Priority = ptr(int32(101)) }, "spec.priority"},
			"negative gpus":      {func(j *v1alpha1.GryviaAIJob) { j.Spec.GPUs = ptr(int32(-1)) }, "spec.gpus"},
			"unknown framework": {func(j *v1alpha1.GryviaAIJob) {
				j.Spec.Framework = ptr(v1alpha1.GryviaAIJobSpecFramework("caffe"))
			}, `spec.framework: Unsupported value: "caffe"`},
		}
		for name, tc := range cases {
			job := env.newJob("invalid-" + strings.ReplaceAll(name, " ", "-"))
			tc.edit(job)
			err := c.SubmitJob(ctx, job)
			if err == nil {
				env.deleteOnCleanup(t, job)
				t.Errorf("%s: the API server accepted the job", name)
				continue
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: error = %v, want an Invalid error naming %q", name, err, tc.want)
			}
		}
	})

	t.Run("every invalid case of gryvia-types is rejected with its expected message", func(t *testing.T) {
		namespaced := namespacedKinds()
		for _, f := range loadFixtures(t, "invalid/*.yaml") {
			obj := newTyped(t, c, f)
			if namespaced[f.Kind] {
				obj.SetNamespace(env.namespace)
			}
			expect := obj.GetAnnotations()["test.gryvia.io/expect"]
			err := c.Create(ctx, obj, client.DryRunAll)
			if err == nil || !strings.Contains(err.Error(), expect) {
				t.Errorf("%s %s: error = %v, want one containing %q", f.Kind, obj.GetName(), err, expect)
			}
		}
	})

	t.Run("the example of every kind survives the API server and decodes into the types", func(t *testing.T) {
		namespaced := namespacedKinds()
		covered := map[string]bool{}
		for _, f := range append(loadFixtures(t, "valid/*.yaml"), loadFixtures(t, "guide/*.yaml")...) {
			u := &unstructured.Unstructured{}
			if err := json.Unmarshal(f.JSON, &u.Object); err != nil {
				t.Fatalf("%s: %v", f.Kind, err)
			}
			u.SetName(u.GetName() + "-" + env.suffix)
			if namespaced[f.Kind] {
				u.SetNamespace(env.namespace)
			}
			// Dry run: the server defaults, validates and returns the object without storing it.
			if err := c.Create(ctx, u, client.DryRunAll); err != nil {
				t.Errorf("%s: dry-run create: %v", f.Kind, err)
				continue
			}
			served, err := json.Marshal(u.Object)
			if err != nil {
				t.Fatalf("%s: %v", f.Kind, err)
			}
			typed, err := c.Scheme().New(v1alpha1.GroupVersion.WithKind(f.Kind))
			if err != nil {
				t.Fatalf("%s: %v", f.Kind, err)
			}
			decoder := json.NewDecoder(bytes.NewReader(served))
			decoder.DisallowUnknownFields()
			if err := decoder.Decode(typed); err != nil {
				t.Errorf("%s: the server's object does not decode strictly into %T: %v", f.Kind, typed, err)
				continue
			}
			encoded, err := json.Marshal(typed)
			if err != nil {
				t.Fatalf("%s: %v", f.Kind, err)
			}
			if diff := jsondiff.Diff(served, encoded); diff != "" {
				t.Errorf("%s: the server's object changed through %T: %s", f.Kind, typed, diff)
				continue
			}
			covered[f.Kind] = true
		}
		for _, info := range v1alpha1.Kinds() {
			if !covered[info.Kind] {
				t.Errorf("no example of %s went through the API server", info.Kind)
			}
		}
	})

	t.Run("every kind lists through its typed list", func(t *testing.T) {
		for _, info := range v1alpha1.Kinds() {
			obj, err := c.Scheme().New(v1alpha1.GroupVersion.WithKind(info.ListKind))
			if err != nil {
				t.Fatalf("%s: %v", info.ListKind, err)
			}
			if err := c.List(ctx, obj.(client.ObjectList)); err != nil {
				t.Errorf("list %s: %v", info.Plural, err)
			}
		}
	})
}

// awaitModified reads w until a MODIFIED event for job name satisfies ok, failing after 30s.
func awaitModified(t *testing.T, w watch.Interface, name string, ok func(*v1alpha1.GryviaAIJob) bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case <-timeout:
			t.Fatalf("no matching MODIFIED event for %s within 30s", name)
		case event, open := <-w.ResultChan():
			if !open {
				t.Fatalf("the watch closed before a matching MODIFIED event for %s", name)
			}
			job, isJob := event.Object.(*v1alpha1.GryviaAIJob)
			if event.Type == watch.Modified && isJob && job.Name == name && ok(job) {
				return
			}
		}
	}
}

func namespacedKinds() map[string]bool {
	out := map[string]bool{}
	for _, info := range v1alpha1.Kinds() {
		out[info.Kind] = info.Namespaced
	}
	return out
}

func loadFixtures(t *testing.T, pattern string) []fixtures.Fixture {
	t.Helper()
	loaded, err := fixtures.Load(fixtureDir, pattern)
	if err != nil {
		t.Fatal(err)
	}
	return loaded
}

// newTyped decodes a fixture strictly into its typed object.
func newTyped(t *testing.T, c *gryvia.Client, f fixtures.Fixture) client.Object {
	t.Helper()
	obj, err := c.Scheme().New(v1alpha1.GroupVersion.WithKind(f.Kind))
	if err != nil {
		t.Fatalf("%s: %v", f.Kind, err)
	}
	decoder := json.NewDecoder(bytes.NewReader(f.JSON))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(obj); err != nil {
		t.Fatalf("%s: decode into %T: %v", f.Kind, obj, err)
	}
	return obj.(client.Object)
}

func ptr[T any](v T) *T { return &v }
