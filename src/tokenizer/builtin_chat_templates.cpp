// Jinja sources of the built-in chat templates (see builtin_chat_templates.h). The training
// renderers (train/chat_template.cpp) are the reference; a unit test checks both agree.
#include "tokenizer/builtin_chat_templates.h"

#include <cctype>

namespace lt {

namespace {

const char* kChatML =
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' }}"
    "{% if not loop.last or add_generation_prompt %}{{ '\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const char* kLlama3 =
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

// <<SYS>> folded into the first user turn; BOS before each later [INST], EOS after each answer.
const char* kLlama2 =
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system = messages[0]['content'] %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set system = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if message['role'] == 'user' %}"
    "{% if not loop.first %}{{ bos_token }}{% endif %}{{ '[INST] ' }}"
    "{% if loop.first and system %}{{ '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' }}{% endif %}"
    "{{ message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}"
    "{% endfor %}";

const char* kAlpaca =
    "{% if messages[0]['role'] == 'system' %}"
    "{{ messages[0]['content'] + '\\n\\n' }}{% set loop_messages = messages[1:] %}"
    "{% else %}"
    "{{ 'Below is an instruction that describes a task. Write a response that appropriately completes the "
    "request.\\n\\n' }}{% set loop_messages = messages %}"
    "{% endif %}"
    "{% for message in loop_messages %}"
    "{% if message['role'] == 'user' %}{{ '### Instruction:\\n' + message['content'] + '\\n\\n### Response:\\n' }}"
    "{% else %}{{ message['content'] + eos_token }}{% if not loop.last %}{{ '\\n\\n' }}{% endif %}{% endif %}"
    "{% endfor %}";

}  // namespace

std::optional<std::string> builtin_chat_template(std::string_view name) {
  std::string n;
  for (char c : name)
    if (c != '-' && c != '_') n += char(std::tolower(static_cast<unsigned char>(c)));
  if (n == "chatml") return kChatML;
  if (n == "llama3") return kLlama3;
  if (n == "llama2") return kLlama2;
  if (n == "alpaca") return kAlpaca;
  return std::nullopt;
}

}  // namespace lt
