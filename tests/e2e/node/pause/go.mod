module edl.invalid/node/pause

go 1.25.0
