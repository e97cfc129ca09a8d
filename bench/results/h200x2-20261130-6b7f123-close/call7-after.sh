for l in $O/world-tp.log $O/moe-w8.log; do echo "$(basename $l .log): $(grep -E 'passed, ' $l)"; grep "^\[ FAIL" $l; done
