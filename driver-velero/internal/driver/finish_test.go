package driver

import (
	"testing"

	"github.com/stretchr/testify/assert"
	velerov1 "github.com/vmware-tanzu/velero/pkg/apis/velero/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestWaitingForSaysWhatToCheck(t *testing.T) {
	for _, tc := range []struct{ phase, want string }{
		{"", "velero backup velero/b had not been picked up by a Velero server (check that the velero server of namespace velero runs)"},
		{"New", "velero backup velero/b had not been picked up by a Velero server (check that the velero server of namespace velero runs)"},
		{"InProgress", "velero backup velero/b is still InProgress"},
	} {
		assert.Equal(t, tc.want, waitingFor("backup", "velero", "b", tc.phase), "phase %q", tc.phase)
	}
}

func TestStartedIsWhatVeleroPickedUp(t *testing.T) {
	for _, tc := range []struct {
		obj  client.Object
		want bool
	}{
		{&velerov1.Backup{}, false},
		{&velerov1.Backup{Status: velerov1.BackupStatus{Phase: velerov1.BackupPhaseNew}}, false},
		{&velerov1.Backup{Status: velerov1.BackupStatus{Phase: velerov1.BackupPhaseInProgress}}, true},
		{&velerov1.Backup{Status: velerov1.BackupStatus{Phase: velerov1.BackupPhaseFailedValidation}}, true},
		{&velerov1.Restore{}, false},
		{&velerov1.Restore{Status: velerov1.RestoreStatus{Phase: velerov1.RestorePhaseNew}}, false},
		{&velerov1.Restore{Status: velerov1.RestoreStatus{Phase: velerov1.RestorePhaseCompleted}}, true},
	} {
		assert.Equal(t, tc.want, started(tc.obj), "%T %+v", tc.obj, tc.obj)
	}
}
