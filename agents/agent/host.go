package agent

import (
	"bufio"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
)

// HostMachine is the machine name of this host: its hostname, lower-case,
// with '-' for '_'.
func HostMachine() (string, error) {
	host, err := os.Hostname()
	return strings.ToLower(strings.ReplaceAll(host, "_", "-")), err
}

// HostCapacity is this host's CPUs (millicores) and memory (bytes, from
// /proc/meminfo; 1 GiB if it cannot be read).
func HostCapacity() map[string]int64 {
	capacity := map[string]int64{"cpu": int64(goruntime.NumCPU()) * 1000, "memory": 1 << 30}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return capacity
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			if kb, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
				capacity["memory"] = kb << 10
			}
		}
	}
	return capacity
}
