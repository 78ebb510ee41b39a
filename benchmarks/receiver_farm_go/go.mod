module hookstream.dev/benchmarks/receiverfarm

go 1.19
