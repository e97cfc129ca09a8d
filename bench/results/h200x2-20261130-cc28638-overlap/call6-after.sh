for l in $O/*-w8*.log; do echo "$(basename $l .log): $(grep -E "passed, " $l) $(grep -cE "FAIL" $l) FAIL lines"; grep -m2 "WARN" $l | cut -c1-220; done
