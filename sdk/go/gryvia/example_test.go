package gryvia_test

import (
	"context"
	"fmt"
	"log"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gryvia/gryvia/sdk/go/api/v1alpha1"
	"github.com/gryvia/gryvia/sdk/go/gryvia"
)

// Submit a training job and wait for it to finish. (Compiled, not run: it needs a cluster.)
func Example() {
	config, err := clientcmd.BuildConfigFromFlags("", clientcmd.RecommendedHomeFile)
	if err != nil {
		log.Fatal(err)
	}
	c, err := gryvia.New(config)
	if err != nil {
		log.Fatal(err)
	}
	gpus := int32(8)
	job := &v1alpha1.GryviaAIJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ml-research", Name: "resnet-train"},
		Spec: v1alpha1.GryviaAIJobSpec{
			Image:   "ghcr.io/example/train:1.0",
			Command: []string{"python", "train.py"},
			GPUs:    &gpus,
		},
	}
	ctx := context.Background()
	if err := c.SubmitJob(ctx, job); err != nil {
		log.Fatal(err)
	}
	done, err := c.WaitForJob(ctx, job.Namespace, job.Name, 2*time.Hour)
	if err != nil {
		log.Fatal(err) // a *gryvia.JobFailedError when the job failed
	}
	fmt.Println(done.Name, *done.Status.Phase)
}
