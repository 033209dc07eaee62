"""Chat templates written for tests/python/test_chat_templates.py in the styles of current model
families (not copied from any model): ChatML / Qwen2.5 with tools, Qwen3-style reasoning, Llama 3 /
3.1 with tools and dates, Mistral v1 / v3 / v7 with [INST], Gemma with role mapping, Phi-3, Phi-4,
SmolLM2, Zephyr, DeepSeek V3 / R1, Command-R, Granite, Hermes tool use, ChatGLM, OLMo, ... Each case
is (name, source, features, special tokens); `features` says which conversations it accepts:
  system      a first system message        alternate   user / assistant strictly alternate
  tools       tool schemas                  tool_calls  assistant tool calls and tool results
  reasoning   reasoning_content             parts       content as a list of {"type": "text"} parts
"""

CHATML = """{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"""

QWEN25_TOOLS = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant built for tests.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are a helpful assistant built for tests.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

QWEN3_THINKING = """{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system") %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

LLAMA3 = """{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"""

LLAMA31_TOOLS = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

LLAMA32_DATE = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%Y") %}
    {%- else %}
        {%- set date_string = "2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Year: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

MISTRAL_V1 = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

MISTRAL_V3_TOOLS = """{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\\n\\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
"""

MISTRAL_V7 = """{{- bos_token }}
{%- for message in messages %}
    {%- if message['role'] == 'user' %}
        {{- '[INST] ' + message['content'] + '[/INST]' }}
    {%- elif message['role'] == 'system' %}
        {{- '[SYSTEM_PROMPT] ' + message['content'] + '[/SYSTEM_PROMPT]' }}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Only user, system and assistant roles are supported!') }}
    {%- endif %}
{%- endfor %}"""

GEMMA = """{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"""

GEMMA3_PARTS = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

PHI3 = """{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"""

PHI4 = """{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'assistant') %}{{'<|im_start|>assistant<|im_sep|>' + message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}"""

SMOLLM2 = """{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system
You are a helpful AI assistant named SmolTest, trained for unit tests<|im_end|>
' }}{% endif %}{{'<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %}"""

ZEPHYR = """{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""

DEEPSEEK_V3 = """{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='', is_first_sp=true) %}{%- for message in messages %}{%- if message['role'] == 'system' %}{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + message['content'] %}{% set ns.is_first_sp = false %}{%- else %}{% set ns.system_prompt = ns.system_prompt + '\n\n' + message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and 'tool_calls' in message %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls'] %}{%- if not ns.is_first %}{%- if message['content'] is none or message['content'] is not defined %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments']|tojson + '\n' + '```' + '<｜tool▁call▁end｜>'}}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments']|tojson + '\n' + '```' + '<｜tool▁call▁end｜>'}}{%- endif %}{%- set ns.is_first = true -%}{%- else %}{{'\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments']|tojson + '\n' + '```' + '<｜tool▁call▁end｜>'}}{%- endif %}{%- endfor %}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- if message['role'] == 'assistant' and 'tool_calls' not in message %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}"""

DEEPSEEK_R1 = """{% set ns = namespace(system_prompt='') %}{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}{%- if message['role'] == 'user' %}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"""

VICUNA = """{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = 'A chat between a curious user and an artificial intelligence assistant.' %}{% endif %}{{ system_message }}{% for message in loop_messages %}{% if message['role'] == 'user' %}{{ ' USER: ' + message['content'].strip() }}{% elif message['role'] == 'assistant' %}{{ ' ASSISTANT: ' + message['content'].strip() + eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ ' ASSISTANT:' }}{% endif %}"""

ALPACA = """{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content'] + '\n\n' }}{% elif message['role'] == 'user' %}{{ '### Instruction:\n' + message['content'] + '\n\n' }}{% elif message['role'] == 'assistant' %}{{ '### Response:\n' + message['content'] + eos_token + '\n\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '### Response:\n' }}{% endif %}"""

COMMAND_R = """{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% elif false == true %}{% set loop_messages = messages %}{% set system_message = 'You are Command-T, a brilliant, sophisticated, test-only AI-assistant.' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% if system_message != false %}{{ '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>' + system_message + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% set content = message['content'] %}{% if message['role'] == 'user' %}{{ '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>' + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% elif message['role'] == 'assistant' %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'  + content.strip() + '<|END_OF_TURN_TOKEN|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}"""

GRANITE_MACRO = """{%- macro render_tool(tool) -%}
{%- set f = tool.function if tool.function is defined else tool -%}
{{ f.name }}({% for name, spec in f.parameters.properties | items %}{{ name }}: {{ spec.type | default('any') }}{{ ', ' if not loop.last }}{% endfor %}) - {{ f.description | default('') | trim }}
{%- endmacro -%}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = "Knowledge Cutoff Date: April 2024.\\nToday's Date: " + (date_string | default('June 1, 2025')) + ".\\nYou are Granite-T, a test assistant." %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- '<|start_of_role|>system<|end_of_role|>' + system_message }}
{%- if tools %}
    {{- '\\nTools:' }}
    {%- for tool in tools %}
        {{- '\\n- ' + render_tool(tool) }}
    {%- endfor %}
{%- endif %}
{{- '<|end_of_text|>\\n' }}
{%- for message in loop_messages %}
    {{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\\n' }}
    {%- if loop.last and add_generation_prompt %}
        {{- '<|start_of_role|>assistant<|end_of_role|>' }}
    {%- endif %}
{%- endfor %}"""

HERMES_TOOLS = """{%- macro json_to_python_type(json_spec) %}
{%- set basic_type_map = {
    "string": "str",
    "number": "float",
    "integer": "int",
    "boolean": "bool"
} %}

{%- if basic_type_map[json_spec.type] is defined %}
    {{- basic_type_map[json_spec.type] }}
{%- elif json_spec.type == "array" %}
    {{- "list[" +  json_to_python_type(json_spec['items']) + "]"}}
{%- elif json_spec.type == "object" %}
    {{- "dict" }}
{%- else %}
    {{- "Any" }}
{%- endif %}
{%- endmacro %}

{{- bos_token }}
{%- if tools is iterable and tools | length > 0 %}
    {{- '<|im_start|>system\\nYou are a function calling AI model. Here are the available tools: <tools> ' }}
    {%- for tool in tools %}
        {%- if tool.function is defined %}
            {%- set tool = tool.function %}
        {%- endif %}
        {{- '{"type": "function", "function": ' }}
        {{- '{"name": "' + tool.name + '", ' }}
        {{- '"description": "' + tool.name + '(' }}
        {%- for param_name, param_fields in tool.parameters.properties|items %}
            {{- param_name + ": " + json_to_python_type(param_fields) }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- endif %}
        {%- endfor %}
        {{- ")" }}
        {%- if tool.return is defined %}
            {{- " -> " + json_to_python_type(tool.return) }}
        {%- endif %}
        {{- " - " + tool.description + "\\n\\n" }}
        {{- '", ' }}
        {{- '"parameters": ' + tool.parameters|tojson }}
        {{- "}" }}
        {%- if not loop.last %}
            {{- "\\n" }}
        {%- endif %}
    {%- endfor %}
    {{- " </tools><|im_end|>\\n" }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" or message.role == "system" or (message.role == "assistant" and message.tool_calls is not defined) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- for tool_call in message.tool_calls %}
            {{- '\\n<tool_call>\\n' }}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '{' }}
            {{- '"name": "' }}
            {{- tool_call.name }}
            {{- '"' }}
            {{- ', '}}
            {%- if tool_call.arguments is defined %}
                {{- '"arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments|tojson }}
                {%- endif %}
            {%- endif %}
            {{- '}' }}
            {{- '\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>tool\\n' }}
        {%- endif %}
        {{- '<tool_response>\\n' }}
        {{- message.content }}
        {%- if not loop.last %}
            {{- '\\n</tool_response>\\n' }}
        {%- else %}
            {{- '\\n</tool_response>' }}
        {%- endif %}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>' }}
        {%- elif loop.last %}
            {{- '<|im_end|>' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

CHATGLM = """[gMASK]<sop>{% for item in messages %}{% if item['tools'] is defined %}<|system|>
tools: {{ item['tools'] | tojson(ensure_ascii=True) }}{% endif %}{% if item['role'] == 'system' %}<|system|>
{{ item['content'] }}{% elif item['role'] == 'user' %}<|user|>
{{ item['content'] }}{% elif item['role'] == 'assistant' %}<|assistant|>
{{ item['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"""

OLMO = """{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\n' + message['content'] + '\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + '\n' }}{% elif message['role'] == 'assistant' %}{% if not loop.last %}{{ '<|assistant|>\n'  + message['content'] + eos_token + '\n' }}{% else %}{{ '<|assistant|>\n'  + message['content'] + eos_token }}{% endif %}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}{% endfor %}"""

OPENCHAT = """{{ bos_token }}{% for message in messages %}{{ 'GPT4 Correct ' + message['role'].title() + ': ' + message['content'] + '<|end_of_turn|>'}}{% endfor %}{% if add_generation_prompt %}{{ 'GPT4 Correct Assistant:' }}{% endif %}"""

GENERATION_TAGS = """{%- for message in messages %}
    {%- if message.role == "assistant" %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}
            {{- message.content | trim + '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}"""

CALL_BLOCK = """{%- macro turn(role) -%}
<|{{ role }}|>{{ caller() | trim }}</|{{ role }}|>
{%- endmacro -%}
{%- macro wrap(role, text, suffix='') -%}{% call turn(role) %} {{ text }}{{ suffix }} {% endcall %}{%- endmacro -%}
{%- for m in messages -%}
{{ wrap(m.role, m.content, suffix=('!' if m.role == 'assistant' else '')) }}
{% endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif %}"""

SET_BLOCK_INDENT = """{%- set header %}
System notes:
{%- for m in messages if m.role == 'system' %}
  * {{ m.content | replace('\\n', ' ') }}
{%- endfor %}
{% endset -%}
{{ header | trim }}
{% for m in messages if m.role != 'system' -%}
### {{ m.role | upper }} (turn {{ loop.index }} of {{ loop.length }})
{{ m.content | indent(4, first=true) }}
{% endfor -%}
{%- if add_generation_prompt -%}
### ASSISTANT
{%- endif %}"""

NAMESPACE_COUNTS = """{%- set ns = namespace(users=0, assistants=0, chars=0, roles=[]) -%}
{%- for m in messages -%}
    {%- if m.role not in ['system', 'user', 'assistant'] -%}
        {{- raise_exception('Unknown role: ' ~ m.role) -}}
    {%- endif -%}
    {%- if m.role == 'user' %}{% set ns.users = ns.users + 1 %}{% elif m.role == 'assistant' %}{% set ns.assistants = ns.assistants + 1 %}{% endif -%}
    {%- set ns.chars = ns.chars + m.content | length -%}
    {%- set ns.roles = ns.roles + [m.role] -%}
{%- endfor -%}
[meta users={{ ns.users }} assistants={{ ns.assistants }} chars={{ ns.chars }} roles={{ ns.roles | unique | list | join('/') }}]
{% for m in messages -%}
{{ loop.index0 }}{{ '*' if loop.first }}{{ '$' if loop.last }} {{ m.role[0] | upper }}{{ m.role[1:] }}{% if loop.previtem is defined %} (after {{ loop.previtem.role }}){% endif %}: {{ m.content }}
{% endfor -%}
{{ 'Assistant:' if add_generation_prompt }}"""

WHITESPACE_HEAVY = """{# A template laid out over many lines, relying on trim_blocks and lstrip_blocks. #}
{% for message in messages %}
    {% if message.role == 'system' %}
        <<SYS>>
        {{ message.content }}
        <</SYS>>
    {% elif message.role == 'user' %}
[USER]   {{ message.content }}
    {% else %}
      {%+ if true %}[BOT] {% endif +%}
{{ message.content -}}
    {% endif %}

{% endfor %}
{% if add_generation_prompt %}
[BOT]
{%- endif %}"""

FILTERS_MIX = """{%- set sys = messages | selectattr('role', 'equalto', 'system') | map(attribute='content') | list -%}
{%- set convo = messages | rejectattr('role', 'equalto', 'system') | list -%}
{%- if sys %}SYSTEM[{{ sys | length }}]: {{ sys | join(' | ') | trim }}
{% endif -%}
{%- for m in convo -%}
{{ m.role | capitalize }}{{ '>' * (loop.index0 % 3 + 1) }} {{ m.content | trim | replace('  ', ' ') }}{{ ' [' ~ (m.content | wordcount) ~ ' words]' if m.role == 'user' }}
{% endfor -%}
{%- if tools -%}
TOOLS: {{ tools | map(attribute='function.name') | sort | join(', ') }} / {{ tools | length }} / first={{ (tools | first).function.name | lower }}
{{ tools | tojson(indent=2) }}
{% endif -%}
{%- if add_generation_prompt %}Assistant>{% endif %}"""

STRING_METHODS = """{%- for m in messages -%}
{%- set words = m.content.split() -%}
{%- set first = words[0] if words else '' -%}
<{{ m.role.upper() }}|{{ m.role.title() }}|{{ first.lower() }}|{{ m.content.startswith(' ') }}|{{ m.content.endswith(('!', '?')) }}|{{ m.content.count('a') }}|{{ m.content.find('e') }}|{{ m.content.rstrip().lstrip() }}|{{ (m.content ~ '')[:5] }}|{{ m.content[-3:] }}|{{ m.content.replace('e', 'E', 1) }}>
{{ '-'.join(words[:3]) }} {{ m.content.splitlines() | length }} {{ m.get('name', 'anon') }} {{ m.keys() | list | length }}
{% endfor -%}
{{ 'GO' if add_generation_prompt else 'END' }}"""

DICT_LOOPS = """{%- for m in messages -%}
{%- for k, v in m | dictsort -%}
{{ k }}={{ v if v is string else v | tojson }}{{ ';' if not loop.last }}
{%- endfor %}
{% if m.tool_calls is defined %}{% for c in m.tool_calls %}CALL {{ c.function.name }} {% for k, v in c.function.arguments.items() %}{{ k }}:{{ v }} {% endfor %}{{ c.function.arguments | tojson(sort_keys=true) }}
{% endfor %}{% endif -%}
{%- endfor -%}
{%- if tools is not none %}{% for t in tools %}{% for name, p in t.function.parameters.properties.items() %}{{ t.function.name }}.{{ name }}:{{ p.type }}{{ '(req)' if name in t.function.parameters.get('required', []) }} {% endfor %}{% endfor %}{% endif -%}
{{- '\nASSISTANT:' if add_generation_prompt }}"""

REASONING_TAGS = """{%- for message in messages -%}
{%- if message.role == 'assistant' -%}
<|assistant|>{% if message.reasoning_content is defined and message.reasoning_content %}<think>{{ message.reasoning_content | trim }}</think>{% endif %}{{ message.content }}<|end|>
{% else -%}
<|{{ message.role }}|>{{ message.content }}<|end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% if enable_thinking | default(true) %}<think>{% endif %}{% endif %}"""

MATH_AND_TESTS = """{%- set n = messages | length -%}
[n={{ n }} half={{ n / 2 }} floor={{ n // 2 }} mod={{ n % 3 }} pow={{ 2 ** n }} neg={{ -n }} float={{ n * 1.5 }} cmp={{ 1 < n <= 10 }}]
{% for m in messages -%}
{{ loop.revindex }}/{{ loop.revindex0 }} {{ m.role }} {{ 'even' if loop.index is even else 'odd' }} {{ m.content is string }} {{ m.name is defined }} {{ m.content | length is divisibleby 2 }} {{ loop.cycle('a', 'b', 'c') }}
{% endfor -%}
{{ range(n) | list }} {{ [n, 3] | max }} {{ (n * 7) | string | length }} {{ '%d-%s' | format(n, 'x') }} {{ 'x' if none is none }} {{ messages[0].role in ['system', 'user'] }}
{%- if add_generation_prompt %}
A:{% endif %}"""

YI_LOOPS = """{% if messages[0]['role'] == 'system' %}{% set offset = 1 %}{% else %}{% set offset = 0 %}{% endif %}{% for message in messages %}{% if loop.index0 >= offset %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>' }}{% if not loop.last %}{{ '\n' }}{% endif %}{% else %}{{ '<|im_start|>system\n' + message['content'] + '<|im_end|>\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '\n<|im_start|>assistant\n' }}{% endif %}"""

FOR_ELSE_BREAK = """{%- for m in messages if m.role == 'tool' -%}
TOOL {{ loop.index }}: {{ m.content }}
{%- else -%}
NO TOOLS
{%- endfor %}
{% for m in messages -%}
{%- if m.role == 'system' %}{% continue %}{% endif -%}
{%- if loop.index > 7 %}...{% break %}{% endif -%}
{{ m.role }}: {{ m.content }}
{% endfor -%}
{%- with last = messages[-1] -%}LAST={{ last.role }}{%- endwith -%}
{%- if add_generation_prompt %} GEN{% endif %}"""

TEMPLATES = [
    ("chatml", CHATML, {"system"}, {}),
    ("qwen25_tools", QWEN25_TOOLS, {"system", "tools", "tool_calls"}, {}),
    ("qwen3_thinking", QWEN3_THINKING, {"system", "reasoning"}, {}),
    ("llama3", LLAMA3, {"system"}, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("llama31_tools", LLAMA31_TOOLS, {"system", "tools", "tool_calls_single"}, {"bos_token": "<|begin_of_text|>"}),
    ("llama32_date", LLAMA32_DATE, {"system"}, {"bos_token": "<|begin_of_text|>"}),
    ("mistral_v1", MISTRAL_V1, {"system", "alternate"}, {"bos_token": "<s>", "eos_token": "</s>"}),
    ("mistral_v3_tools", MISTRAL_V3_TOOLS, {"system", "alternate", "tools", "tool_calls_id9"}, {"bos_token": "<s>", "eos_token": "</s>"}),
    ("mistral_v7", MISTRAL_V7, {"system"}, {"bos_token": "<s>", "eos_token": "</s>"}),
    ("gemma", GEMMA, {"alternate"}, {"bos_token": "<bos>"}),
    ("gemma3_parts", GEMMA3_PARTS, {"system", "alternate", "parts"}, {"bos_token": "<bos>"}),
    ("phi3", PHI3, {"system"}, {"eos_token": "<|endoftext|>"}),
    ("phi4", PHI4, {"system"}, {}),
    ("smollm2", SMOLLM2, {"system"}, {}),
    ("zephyr", ZEPHYR, {"system"}, {"eos_token": "</s>"}),
    ("deepseek_v3", DEEPSEEK_V3, {"system", "tool_calls_string"}, {"bos_token": "<｜begin▁of▁sentence｜>"}),
    ("deepseek_r1", DEEPSEEK_R1, {"system"}, {"bos_token": "<｜begin▁of▁sentence｜>"}),
    ("vicuna", VICUNA, {"system"}, {"eos_token": "</s>"}),
    ("alpaca", ALPACA, {"system"}, {"eos_token": "</s>"}),
    ("command_r", COMMAND_R, {"system", "alternate"}, {"bos_token": "<BOS_TOKEN>"}),
    ("granite_macro", GRANITE_MACRO, {"system", "tools"}, {}),
    ("hermes_tools", HERMES_TOOLS, {"system", "tools", "tool_calls"}, {"bos_token": "<|begin_of_text|>"}),
    ("chatglm", CHATGLM, {"system"}, {}),
    ("olmo", OLMO, {"system"}, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}),
    ("openchat", OPENCHAT, {"system"}, {"bos_token": "<s>"}),
    ("generation_tags", GENERATION_TAGS, {"system"}, {}),
    ("call_block", CALL_BLOCK, {"system"}, {}),
    ("set_block_indent", SET_BLOCK_INDENT, {"system"}, {}),
    ("namespace_counts", NAMESPACE_COUNTS, {"system"}, {}),
    ("whitespace_heavy", WHITESPACE_HEAVY, {"system"}, {}),
    ("filters_mix", FILTERS_MIX, {"system", "tools"}, {}),
    ("string_methods", STRING_METHODS, {"system"}, {}),
    ("dict_loops", DICT_LOOPS, {"system", "tools", "tool_calls"}, {}),
    ("reasoning_tags", REASONING_TAGS, {"system", "reasoning"}, {}),
    ("math_and_tests", MATH_AND_TESTS, {"system"}, {}),
    ("yi_loops", YI_LOOPS, {"system"}, {}),
    ("for_else_break", FOR_ELSE_BREAK, {"system", "tool_calls"}, {}),
]
