// Functions that turn model folders into other model folders or files (include/leantune/merge.h,
// quantize.h, gguf.h), and the machine's description (machine.h).
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "leantune/gguf.h"
#include "leantune/machine.h"
#include "leantune/merge.h"
#include "leantune/quantize.h"

namespace leantune_py {

using namespace nb::literals;

void bind_files(nb::module_& m) {
  m.def("merge_adapter", [](const std::string& base, const std::string& adapter, const std::string& out) {
          nb::gil_scoped_release release;
          leantune::merge_adapter(base, adapter, out);
        }, "base_model"_a, "adapter"_a, "out_dir"_a);
  m.def("quantize_model", [](const std::string& model, const std::string& type, int blocksize, bool double_quant,
                             const std::string& out) {
          leantune::QuantizeOptions o;
          o.type = leantune::parse_quantization(type);
          o.blocksize = blocksize;
          o.double_quant = double_quant;
          nb::gil_scoped_release release;
          leantune::quantize_model(model, o, out);
        }, "model"_a, "type"_a, "blocksize"_a, "double_quant"_a, "out_dir"_a);
  m.def("export_gguf", [](const std::string& path, const std::string& model, const std::string& adapter,
                          const std::string& tokenizer, const std::string& base, const std::string& name,
                          const std::string& type) {
          leantune::GgufExportOptions o{model, adapter, tokenizer, base, name, leantune::parse_gguf_type(type)};
          leantune::GgufExportResult r;
          {
            nb::gil_scoped_release release;
            r = leantune::export_gguf(path, o);
          }
          nb::dict d;
          d["tensors"] = r.tensors;
          d["adapter_only"] = r.adapter_only;
          d["tokenizer_model"] = r.tokenizer_model;
          d["tokenizer_path"] = r.tokenizer_path;
          d["lora_r"] = r.lora_r;
          d["lora_scaling"] = r.lora_scaling;
          return d;
        }, "path"_a, "model"_a, "adapter"_a, "tokenizer"_a, "base"_a, "name"_a, "type"_a);
  m.def("machine_info", [] {
          leantune::MachineInfo i = leantune::machine_info();
          nb::dict d;
          d["cpu_features"] = i.cpu_features;
          d["kernels"] = i.kernels;
          d["hardware_threads"] = i.hardware_threads;
          return d;
        });
}

}  // namespace leantune_py
