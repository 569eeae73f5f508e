// Command kubectl is the upstream kubectl command, linked from the published k8s.io/kubectl module
// at the same minor version as the test stack's kube-apiserver. The e2e tests drive the API server
// through it exactly as a user would (apply, get -o wide, describe, --dry-run=server).
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
