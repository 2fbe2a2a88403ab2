package gryvia_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gryvia/gryvia/sdk/go/api/v1alpha1"
	"github.com/gryvia/gryvia/sdk/go/gryvia"
)

const testNamespace = "team-a"

func job(name string, phase v1alpha1.GryviaAIJobStatusPhase, message string) *v1alpha1.GryviaAIJob {
	j := &v1alpha1.GryviaAIJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name},
		Spec:       v1alpha1.GryviaAIJobSpec{Image: "ghcr.io/example/train:1.0"},
	}
	if phase != "" {
		j.Status = &v1alpha1.GryviaAIJobStatus{Phase: &phase}
		if message != "" {
			j.Status.Message = &message
		}
	}
	return j
}

// fakeClient returns a Client over controller-runtime's fake client holding objs, and a
// channel that receives once per Watch call after the watch is open.
func fakeClient(t *testing.T, funcs interceptor.Funcs, objs ...client.Object) (*gryvia.Client, <-chan struct{}) {
	t.Helper()
	scheme, err := gryvia.NewScheme()
	if err != nil {
		t.Fatalf("new scheme: %v", err)
	}
	watching := make(chan struct{}, 16)
	if funcs.Watch == nil {
		funcs.Watch = func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			w, err := c.Watch(ctx, list, opts...)
			watching <- struct{}{}
			return w, err
		}
	}
	c := fake.NewClientBuilder().
		WithScheme(scheme).
		WithStatusSubresource(&v1alpha1.GryviaAIJob{}).
		WithObjects(objs...).
		WithInterceptorFuncs(funcs).
		Build()
	return gryvia.Wrap(c), watching
}

func setPhase(t *testing.T, c *gryvia.Client, name string, phase v1alpha1.GryviaAIJobStatusPhase) {
	t.Helper()
	current := &v1alpha1.GryviaAIJob{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: testNamespace, Name: name}, current); err != nil {
		t.Errorf("get job to set phase %s: %v", phase, err)
		return
	}
	current.Status = &v1alpha1.GryviaAIJobStatus{Phase: &phase}
	if err := c.Status().Update(context.Background(), current); err != nil {
		t.Errorf("set phase %s: %v", phase, err)
	}
}

func TestWaitForJobReturnsAJobThatAlreadySucceeded(t *testing.T) {
	c, _ := fakeClient(t, interceptor.Funcs{}, job("done", v1alpha1.GryviaAIJobStatusPhaseSucceeded, ""))
	got, err := c.WaitForJob(context.Background(), testNamespace, "done", time.Minute)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if got.Name != "done" || *got.Status.Phase != v1alpha1.GryviaAIJobStatusPhaseSucceeded {
		t.Fatalf("got %s in phase %v", got.Name, got.Status.Phase)
	}
}

func TestWaitForJobSeesAPhaseChangeMadeWhileItWaits(t *testing.T) {
	c, watching := fakeClient(t, interceptor.Funcs{}, job("train", v1alpha1.GryviaAIJobStatusPhasePending, ""))
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		<-watching
		setPhase(t, c, "train", v1alpha1.GryviaAIJobStatusPhaseRunning)
		setPhase(t, c, "train", v1alpha1.GryviaAIJobStatusPhaseSucceeded)
	}()
	got, err := c.WaitForJob(context.Background(), testNamespace, "train", time.Minute)
	<-writer
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if *got.Status.Phase != v1alpha1.GryviaAIJobStatusPhaseSucceeded {
		t.Fatalf("returned in phase %s", *got.Status.Phase)
	}
}

func TestWaitForJobReportsAFailedJobByNameAndPhase(t *testing.T) {
	c, _ := fakeClient(t, interceptor.Funcs{}, job("broken", v1alpha1.GryviaAIJobStatusPhaseFailed, "image pull failed"))
	got, err := c.WaitForJob(context.Background(), testNamespace, "broken", time.Minute)
	var failed *gryvia.JobFailedError
	if !errors.As(err, &failed) {
		t.Fatalf("error = %v, want a *JobFailedError", err)
	}
	if want := "job team-a/broken failed: phase Failed: image pull failed"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if got == nil || failed.Job == nil || failed.Name != "broken" {
		t.Errorf("the failed job is not returned: got %v, error job %v", got, failed.Job)
	}
}

func TestWaitForJobTimesOutNamingTheJobAndItsLastPhase(t *testing.T) {
	c, _ := fakeClient(t, interceptor.Funcs{}, job("slow", v1alpha1.GryviaAIJobStatusPhaseRunning, ""))
	_, err := c.WaitForJob(context.Background(), testNamespace, "slow", 50*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want one wrapping context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "team-a/slow") || !strings.Contains(err.Error(), "still in phase Running") {
		t.Errorf("error %q does not name the job and its phase", err)
	}
}

func TestWaitForJobReportsAJobThatDoesNotExist(t *testing.T) {
	c, _ := fakeClient(t, interceptor.Funcs{})
	_, err := c.WaitForJob(context.Background(), testNamespace, "ghost", time.Minute)
	if err == nil || !strings.Contains(err.Error(), "wait for job team-a/ghost") || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("error = %v, want a not-found error naming the job", err)
	}
}

func TestWaitForJobReportsAJobDeletedWhileItWaits(t *testing.T) {
	// Delete only after WaitForJob has read the job: a job missing at the first read is "not
	// found", not "deleted while waiting".
	read := make(chan struct{}, 16)
	funcs := interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			err := c.Get(ctx, key, obj, opts...)
			read <- struct{}{}
			return err
		},
	}
	c, _ := fakeClient(t, funcs, job("gone", v1alpha1.GryviaAIJobStatusPhaseRunning, ""))
	deleter := make(chan struct{})
	go func() {
		defer close(deleter)
		<-read
		if err := c.Delete(context.Background(), job("gone", "", "")); err != nil {
			t.Errorf("delete: %v", err)
		}
	}()
	_, err := c.WaitForJob(context.Background(), testNamespace, "gone", time.Minute)
	<-deleter
	if !errors.Is(err, gryvia.ErrJobDeleted) {
		t.Fatalf("error = %v, want one wrapping ErrJobDeleted", err)
	}
}

func TestWaitForJobReopensAWatchTheServerCloses(t *testing.T) {
	var calls atomic.Int32
	opened := make(chan struct{}, 4)
	funcs := interceptor.Funcs{
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			if calls.Add(1) == 1 {
				closed := watch.NewFake()
				closed.Stop()
				return closed, nil
			}
			w, err := c.Watch(ctx, list, opts...)
			opened <- struct{}{}
			return w, err
		},
	}
	c, _ := fakeClient(t, funcs, job("flaky", v1alpha1.GryviaAIJobStatusPhaseRunning, ""))
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		<-opened
		setPhase(t, c, "flaky", v1alpha1.GryviaAIJobStatusPhaseSucceeded)
	}()
	_, err := c.WaitForJob(context.Background(), testNamespace, "flaky", time.Minute)
	<-writer
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	if calls.Load() < 2 {
		t.Fatalf("the watch was opened %d times, want a second one after the first closed", calls.Load())
	}
}

func TestSubmitJobChecksNamespaceAndNameBeforeAnyRequest(t *testing.T) {
	var creates atomic.Int32
	c, _ := fakeClient(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates.Add(1)
			return c.Create(ctx, obj, opts...)
		},
	})
	noNamespace := job("x", "", "")
	noNamespace.Namespace = ""
	noName := job("", "", "")
	cases := map[string]struct {
		job  *v1alpha1.GryviaAIJob
		want string
	}{
		"nil":          {nil, "submit job: job is nil"},
		"no namespace": {noNamespace, `submit job "x": metadata.namespace is required`},
		"no name":      {noName, `submit job in namespace "team-a": metadata.name or metadata.generateName is required`},
	}
	for name, tc := range cases {
		if err := c.SubmitJob(context.Background(), tc.job); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want %q", name, err, tc.want)
		}
	}
	if creates.Load() != 0 {
		t.Errorf("%d create requests were sent for invalid jobs", creates.Load())
	}
}

func TestSubmitJobCreatesAJobThatGetJobReturns(t *testing.T) {
	c, _ := fakeClient(t, interceptor.Funcs{})
	submitted := job("resnet", "", "")
	if err := c.SubmitJob(context.Background(), submitted); err != nil {
		t.Fatalf("submit: %v", err)
	}
	if submitted.ResourceVersion == "" {
		t.Error("SubmitJob did not update the job with the stored object")
	}
	got, err := c.GetJob(context.Background(), testNamespace, "resnet")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.Spec.Image != submitted.Spec.Image {
		t.Errorf("stored image %q, submitted %q", got.Spec.Image, submitted.Spec.Image)
	}
	if err := c.SubmitJob(context.Background(), job("resnet", "", "")); err == nil || !strings.Contains(err.Error(), "submit job team-a/resnet") {
		t.Errorf("second submit: error = %v, want an already-exists error naming the job", err)
	}
}

func TestListTenantsReturnsEveryTenant(t *testing.T) {
	tenants := []client.Object{
		&v1alpha1.GryviaTenant{ObjectMeta: metav1.ObjectMeta{Name: "ml-research"}, Spec: v1alpha1.GryviaTenantSpec{DisplayName: "ML"}},
		&v1alpha1.GryviaTenant{ObjectMeta: metav1.ObjectMeta{Name: "vision"}, Spec: v1alpha1.GryviaTenantSpec{DisplayName: "Vision"}},
	}
	c, _ := fakeClient(t, interceptor.Funcs{}, tenants...)
	got, err := c.ListTenants(context.Background())
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	names := map[string]string{}
	for _, tenant := range got {
		names[tenant.Name] = tenant.Spec.DisplayName
	}
	if len(got) != 2 || names["ml-research"] != "ML" || names["vision"] != "Vision" {
		t.Fatalf("tenants = %v", names)
	}
}

func TestNewSchemeKnowsBuiltinAndGryviaKinds(t *testing.T) {
	scheme, err := gryvia.NewScheme()
	if err != nil {
		t.Fatalf("new scheme: %v", err)
	}
	for _, gvk := range []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("Namespace"),
		v1alpha1.GroupVersion.WithKind("GryviaAIJob"),
		v1alpha1.GroupVersion.WithKind("GryviaTenantList"),
	} {
		if !scheme.Recognizes(gvk) {
			t.Errorf("scheme does not know %s", gvk)
		}
	}
}

func TestNewRejectsANilConfig(t *testing.T) {
	if _, err := gryvia.New(nil); err == nil || !strings.Contains(err.Error(), "config is nil") {
		t.Fatalf("error = %v", err)
	}
}
