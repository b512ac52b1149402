module eckpt/bench/klauspost

go 1.26.8

require (
	github.com/klauspost/cpuid/v2 v2.3.0
	github.com/klauspost/reedsolomon v1.14.2
)

require golang.org/x/sys v0.30.0 // indirect
