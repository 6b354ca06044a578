module github.com/coffer-backup/coffer/driver-velero

go 1.26.0

replace github.com/coffer-backup/coffer/apis => ../apis
