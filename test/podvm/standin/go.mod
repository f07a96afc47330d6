module github.com/caa-gcp-t4/test/podvm/standin

go 1.25
