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
print("board:", platform.machine(), "torch", torch.__version__, "qpu_dot.dot =", got, "(exact), product ok, matmul ok")
PY
