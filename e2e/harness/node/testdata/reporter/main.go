// Command reporter is the workload of the node harness's test: it writes a JSON report to
// /dev/termination-log (and stdout) and exits with the code in REPORT_EXIT.
//
//	REPORT_MESSAGE  copied into the report
//	REPORT_EXIT     exit code (default 0)
//	REPORT_CONNECT  host:port to dial over TCP: it sends REPORT_MESSAGE plus a newline and
//	                reports the line it reads back as "reply"
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

type report struct {
	Message string `json:"message"`
	UID     int    `json:"uid"`
	Reply   string `json:"reply,omitempty"`
	Error   string `json:"error,omitempty"`
}

func main() {
	r := report{Message: os.Getenv("REPORT_MESSAGE"), UID: os.Getuid()}
	code, _ := strconv.Atoi(os.Getenv("REPORT_EXIT"))
	if addr := os.Getenv("REPORT_CONNECT"); addr != "" {
		reply, err := exchange(addr, r.Message)
		r.Reply = reply
		if err != nil {
			r.Error = err.Error()
			code = 4
		}
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	if err := os.WriteFile("/dev/termination-log", b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "writing the termination message:", err)
		os.Exit(5)
	}
	os.Exit(code)
}

func exchange(addr, msg string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(conn, msg); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}
