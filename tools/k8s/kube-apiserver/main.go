// Command kube-apiserver is Kubernetes' own API server command, linked from the pinned
// k8s.io/kubernetes module with the same side-effect imports as upstream's cmd/kube-apiserver.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream links them

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
