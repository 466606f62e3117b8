# What a board booted from qpu-dot's exported tree runs to show seed 004's chain works there:
# torch and the QPULib extension import, and give exact answers. bench/board_check runs it on the
# emulated armv7 board (`--check-file examples/qpu-dot/board-check.sh`); on a Pi booted over NFS
# from the same export, run it as root with `sh board-check.sh`.
python3 - <<'PY'
import platform, torch, qpu_dot
x = torch.arange(100, dtype=torch.float32) / 4
y = (torch.arange(100, dtype=torch.float32) % 7 - 3) / 2
exact = sum(a * b for a, b in zip(x.tolist(), y.tolist()))
got = qpu_dot.dot(x, y).item()
assert got == exact, ("qpu_dot.dot", got, exact)
assert torch.equal(qpu_dot.product(x, y), x * y), "qpu_dot.product"
m = torch.arange(9, dtype=torch.float32).reshape(3, 3)
assert (m @ m).sum().item() == 486.0, "matmul"
# torch.distributed's TCPStore on the board's own kernel, in a child with a deadline: a wrong
# answer fails the check, no answer is said (it hung on 32-bit ARM before the recipe's
# 2.6-tcpstore-32bit-sizes.patch)
import subprocess, sys
store = ("import datetime, torch.distributed as d\n"
         "s = d.TCPStore('127.0.0.1', 29511, 1, True, datetime.timedelta(seconds=60), use_libuv=False)\n"
         "s.set('k', 'v'); assert s.get('k') == b'v' and s.num_keys() >= 1 and s.check(['k'])\n"
         "print('ok')\n")
try:
    child = subprocess.run([sys.executable, "-c", store], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, ("TCPStore", child.stderr[-2000:])
    tcpstore = "TCPStore ok"
except subprocess.TimeoutExpired:
    tcpstore = "TCPStore: no answer within 300 s"
print("board:", platform.machine(), "torch", torch.__version__, "qpu_dot.dot =", got, "(exact), product ok, matmul ok,", tcpstore)
PY
