// Seed 004's torch extension: element-wise product and dot product of two float vectors,
// computed by the Raspberry Pi's VideoCore IV QPUs through QPULib (or QPULib's emulator, built
// with -DEMULATION_MODE, on any machine). Each of NQPUS QPUs takes every NQPUS-th block of 16
// floats, one per SIMD lane; the dot product's 16 x NQPUS partial sums are added on the CPU.
#include <torch/extension.h>

#include <QPULib.h>

namespace {

const int NQPUS = 4;
const int BLOCK = 16 * NQPUS;  // floats one iteration of all QPUs takes

void product_kernel(Int n, Ptr<Float> x, Ptr<Float> y)
{
  Int inc = numQPUs() << 4;
  Ptr<Float> p = x + index() + (me() << 4);
  Ptr<Float> q = y + index() + (me() << 4);
  gather(p); gather(q);
  Float a, b;
  For (Int i = 0, i < n, i = i + inc)
    gather(p + inc); gather(q + inc);  // the next block's, while this one is multiplied
    receive(a); receive(b);
    store(a * b, p);
    p = p + inc; q = q + inc;
  End
  receive(a); receive(b);
}

void dot_kernel(Int n, Ptr<Float> x, Ptr<Float> y, Ptr<Float> sums)
{
  Int inc = numQPUs() << 4;
  Ptr<Float> p = x + index() + (me() << 4);
  Ptr<Float> q = y + index() + (me() << 4);
  gather(p); gather(q);
  Float a, b;
  Float acc = 0;
  For (Int i = 0, i < n, i = i + inc)
    gather(p + inc); gather(q + inc);
    receive(a); receive(b);
    acc = acc + a * b;
    p = p + inc; q = q + inc;
  End
  receive(a); receive(b);
  store(acc, sums + index() + (me() << 4));
}

// x and y copied into arrays the QPUs share, zero-padded to whole blocks plus the one block the
// kernels' prefetch reads past the end.
int load(const torch::Tensor& x, const torch::Tensor& y, SharedArray<float>& a, SharedArray<float>& b)
{
  const int n = static_cast<int>(x.numel());
  const int padded = (n + BLOCK - 1) / BLOCK * BLOCK;
  const float* xs = x.data_ptr<float>();
  const float* ys = y.data_ptr<float>();
  for (int i = 0; i < padded + BLOCK; i++) {
    a[i] = i < n ? xs[i] : 0.0f;
    b[i] = i < n ? ys[i] : 0.0f;
  }
  return padded;
}

void check(const torch::Tensor& x, const torch::Tensor& y)
{
  TORCH_CHECK(x.dim() == 1 && y.dim() == 1 && x.numel() == y.numel(),
              "qpu_dot takes two 1-D tensors of the same length");
}

}  // namespace

torch::Tensor product(torch::Tensor x, torch::Tensor y)
{
  check(x, y);
  x = x.to(torch::kFloat32).contiguous();
  y = y.to(torch::kFloat32).contiguous();
  const int n = static_cast<int>(x.numel());
  const int room = (n + BLOCK - 1) / BLOCK * BLOCK + BLOCK;
  SharedArray<float> a(room), b(room);
  const int padded = load(x, y, a, b);
  auto kernel = compile(product_kernel);
  kernel.setNumQPUs(NQPUS);
  kernel(padded, &a, &b);
  torch::Tensor out = torch::empty({n}, torch::kFloat32);
  float* o = out.data_ptr<float>();
  for (int i = 0; i < n; i++) o[i] = a[i];
  return out;
}

torch::Tensor dot(torch::Tensor x, torch::Tensor y)
{
  check(x, y);
  x = x.to(torch::kFloat32).contiguous();
  y = y.to(torch::kFloat32).contiguous();
  const int room = (static_cast<int>(x.numel()) + BLOCK - 1) / BLOCK * BLOCK + BLOCK;
  SharedArray<float> a(room), b(room), sums(BLOCK);
  const int padded = load(x, y, a, b);
  auto kernel = compile(dot_kernel);
  kernel.setNumQPUs(NQPUS);
  kernel(padded, &a, &b, &sums);
  double total = 0.0;
  for (int i = 0; i < BLOCK; i++) total += sums[i];
  return torch::scalar_tensor(total, torch::kFloat32);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
  m.doc() = "dot and element-wise products on the VideoCore IV QPUs (QPULib)";
  m.def("product", &product, "x * y, element-wise, on the QPUs");
  m.def("dot", &dot, "the dot product of x and y, its products and partial sums on the QPUs");
}
