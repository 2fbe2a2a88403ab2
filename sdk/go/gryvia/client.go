// Package gryvia is a small Kubernetes client for Gryvia's gryvia.io/v1alpha1 API.
//
// Client wraps a controller-runtime client.WithWatch whose scheme knows the Kubernetes
// built-in types and every Gryvia kind, so the full controller-runtime API (Get, List, Create,
// Update, Patch, Delete, Status(), Watch) works on the typed objects of package v1alpha1.
// On top of it are a few helpers for common tasks: SubmitJob, WaitForJob, GetJob and
// ListTenants.
//
// It is not an operator framework, does not cache, and holds no Gryvia logic: what an object
// means is up to the operators that watch it.
package gryvia

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gryvia/gryvia/sdk/go/api/v1alpha1"
)

// Client is a controller-runtime client for Gryvia objects. The embedded client.WithWatch
// offers every generic operation; the methods of Client add Gryvia-specific helpers. It is
// safe for concurrent use.
type Client struct {
	client.WithWatch
}

// NewScheme returns a scheme that knows the Kubernetes built-in types and every kind of
// gryvia.io/v1alpha1.
//
// # Errors
//
// It fails only if a type cannot be registered, which means conflicting registrations.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("new scheme: add Kubernetes types: %w", err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("new scheme: add %s types: %w", v1alpha1.GroupVersion, err)
	}
	return scheme, nil
}

// New connects to the API server that config names. It contacts the server only when a
// request is made: the REST mapping of each kind is discovered on first use.
//
// # Errors
//
// It fails when config is nil or unusable (for example a malformed host or TLS settings).
func New(config *rest.Config) (*Client, error) {
	if config == nil {
		return nil, errors.New("new gryvia client: config is nil")
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, fmt.Errorf("new gryvia client: %w", err)
	}
	c, err := client.NewWithWatch(config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("new gryvia client: %w", err)
	}
	return &Client{WithWatch: c}, nil
}

// Wrap returns a Client around an existing client, such as controller-runtime's fake client
// in tests. Its scheme must know the v1alpha1 kinds (see NewScheme).
func Wrap(c client.WithWatch) *Client {
	return &Client{WithWatch: c}
}

// SubmitJob creates job on the API server. On success job holds what the server stored,
// including its name when only metadata.generateName was set, its defaults and its
// resourceVersion.
//
// # Errors
//
// It fails without a request when job is nil or lacks metadata.namespace, or both
// metadata.name and metadata.generateName. Otherwise it returns the API server's error,
// wrapped: apierrors.IsInvalid reports a job the CRD's schema rejects (the message names the
// field) and apierrors.IsAlreadyExists a name in use.
func (c *Client) SubmitJob(ctx context.Context, job *v1alpha1.GryviaAIJob) error {
	if job == nil {
		return errors.New("submit job: job is nil")
	}
	if job.Namespace == "" {
		return fmt.Errorf("submit job %q: metadata.namespace is required (GryviaAIJob is namespaced)", job.Name)
	}
	if job.Name == "" && job.GenerateName == "" {
		return fmt.Errorf("submit job in namespace %q: metadata.name or metadata.generateName is required", job.Namespace)
	}
	if err := c.Create(ctx, job); err != nil {
		name := job.Name
		if name == "" {
			name = job.GenerateName + "*"
		}
		return fmt.Errorf("submit job %s/%s: %w", job.Namespace, name, err)
	}
	return nil
}

// GetJob returns the job namespace/name.
//
// # Errors
//
// It returns the API server's error, wrapped; apierrors.IsNotFound reports a missing job.
func (c *Client) GetJob(ctx context.Context, namespace, name string) (*v1alpha1.GryviaAIJob, error) {
	job := &v1alpha1.GryviaAIJob{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, job); err != nil {
		return nil, fmt.Errorf("get job %s/%s: %w", namespace, name, err)
	}
	return job, nil
}

// ListTenants returns every GryviaTenant (a cluster-scoped kind), in the API server's order.
//
// # Errors
//
// It returns the API server's error, wrapped.
func (c *Client) ListTenants(ctx context.Context) ([]v1alpha1.GryviaTenant, error) {
	list := &v1alpha1.GryviaTenantList{}
	if err := c.List(ctx, list); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return list.Items, nil
}

// JobFailedError is WaitForJob's error for a job that reached phase Failed.
type JobFailedError struct {
	// Namespace and Name identify the job.
	Namespace, Name string
	// Job is the job as last observed.
	Job *v1alpha1.GryviaAIJob
}

func (e *JobFailedError) Error() string {
	msg := fmt.Sprintf("job %s/%s failed: phase %s", e.Namespace, e.Name, v1alpha1.GryviaAIJobStatusPhaseFailed)
	if e.Job != nil && e.Job.Status != nil && e.Job.Status.Message != nil && *e.Job.Status.Message != "" {
		msg += ": " + *e.Job.Status.Message
	}
	return msg
}

// ErrJobDeleted is wrapped by WaitForJob's error when the job is deleted while it waits.
var ErrJobDeleted = errors.New("job was deleted")

// restartBackoff bounds how fast WaitForJob re-opens a watch the server closed.
const (
	restartBackoffMin = 100 * time.Millisecond
	restartBackoffMax = 5 * time.Second
)

// WaitForJob watches the job namespace/name until its status.phase is Succeeded or Failed,
// or until timeout passes (no limit but ctx's when timeout <= 0). It returns the job as
// observed in its final phase: with a nil error for Succeeded, with a *JobFailedError for
// Failed.
//
// # Errors
//
//   - phase Failed: a *JobFailedError (errors.As) that names the job and carries it.
//   - timeout or ctx done: an error naming the job and the last phase seen, wrapping
//     context.DeadlineExceeded or ctx's error.
//   - job deleted while waiting: an error wrapping ErrJobDeleted.
//   - job missing at the start, or any other API error: the API server's error, wrapped.
//
// # Guarantees
//
// A phase change is never missed: the watch is opened before the job is read, so a change
// lands either in the read or in the watch. A watch the server closes is re-opened (after a
// short backoff that grows to 5s while it keeps closing).
func (c *Client) WaitForJob(ctx context.Context, namespace, name string, timeout time.Duration) (*v1alpha1.GryviaAIJob, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	lastPhase := ""
	backoff := restartBackoffMin
	for {
		job, done, err := c.waitOnce(ctx, namespace, name, &lastPhase)
		if done || err != nil {
			return job, err
		}
		// The watch closed before the job finished; open a new one after a pause.
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, waitTimeout(ctx, namespace, name, lastPhase)
		case <-timer.C:
		}
		backoff = min(2*backoff, restartBackoffMax)
	}
}

// waitOnce opens one watch, reads the job, and follows the watch until the job finishes
// (done), fails to be observed (err), or the watch ends (neither).
func (c *Client) waitOnce(ctx context.Context, namespace, name string, lastPhase *string) (*v1alpha1.GryviaAIJob, bool, error) {
	w, err := c.Watch(ctx, &v1alpha1.GryviaAIJobList{},
		client.InNamespace(namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, waitTimeout(ctx, namespace, name, *lastPhase)
		}
		return nil, false, fmt.Errorf("wait for job %s/%s: watch: %w", namespace, name, err)
	}
	defer w.Stop()

	job := &v1alpha1.GryviaAIJob{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, job); err != nil {
		if ctx.Err() != nil {
			return nil, false, waitTimeout(ctx, namespace, name, *lastPhase)
		}
		if apierrors.IsNotFound(err) && *lastPhase != "" {
			return nil, false, fmt.Errorf("wait for job %s/%s: %w", namespace, name, ErrJobDeleted)
		}
		return nil, false, fmt.Errorf("wait for job %s/%s: %w", namespace, name, err)
	}
	if done, err := finished(job, lastPhase); done {
		return job, true, err
	}

	for {
		select {
		case <-ctx.Done():
			return nil, false, waitTimeout(ctx, namespace, name, *lastPhase)
		case event, open := <-w.ResultChan():
			if !open {
				return nil, false, nil
			}
			switch event.Type {
			case watch.Error:
				// Typically "too old resource version" after a long disconnect: start over.
				return nil, false, nil
			case watch.Deleted:
				if observed, ok := event.Object.(*v1alpha1.GryviaAIJob); ok && observed.Name == name {
					return nil, false, fmt.Errorf("wait for job %s/%s: %w", namespace, name, ErrJobDeleted)
				}
			case watch.Added, watch.Modified:
				observed, ok := event.Object.(*v1alpha1.GryviaAIJob)
				if !ok || observed.Name != name {
					continue // a fake client may ignore the field selector
				}
				if done, err := finished(observed, lastPhase); done {
					return observed, true, err
				}
			}
		}
	}
}

// finished reports whether job is in a final phase, with the error for Failed, and records
// its phase in lastPhase.
func finished(job *v1alpha1.GryviaAIJob, lastPhase *string) (bool, error) {
	if job.Status == nil || job.Status.Phase == nil {
		*lastPhase = "(none)"
		return false, nil
	}
	*lastPhase = string(*job.Status.Phase)
	switch *job.Status.Phase {
	case v1alpha1.GryviaAIJobStatusPhaseSucceeded:
		return true, nil
	case v1alpha1.GryviaAIJobStatusPhaseFailed:
		return true, &JobFailedError{Namespace: job.Namespace, Name: job.Name, Job: job}
	default:
		return false, nil
	}
}

func waitTimeout(ctx context.Context, namespace, name, lastPhase string) error {
	if lastPhase == "" {
		lastPhase = "(not observed)"
	}
	return fmt.Errorf("wait for job %s/%s: still in phase %s: %w", namespace, name, lastPhase, context.Cause(ctx))
}
