module github.com/coffer-backup/coffer/verifier

go 1.26.0

replace github.com/coffer-backup/coffer/apis => ../apis
