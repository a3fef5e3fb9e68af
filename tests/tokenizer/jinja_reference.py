#!/usr/bin/env python3
# Regenerates jinja_reference.json: small templates and full chat templates
# rendered by Jinja2 3.1 configured exactly as transformers renders chat
# templates. The C++ interpreter must reproduce every output (or raise the
# same error). Run: python3 tests/tokenizer/jinja_reference.py
import datetime, json, os, sys
import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "..", "..", "shared", "golden", "chat", "templates")


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 1, 15).strftime(fmt)


def render(src, ctx):
    try:
        return {"expected": env.from_string(src).render(**ctx)}
    except Exception as e:  # the C++ side must raise too, with this message
        return {"error": str(e)}


PROBES = []
section = ""


def sec(name):
    global section
    section = name


def p(t, c=None):
    PROBES.append({"name": "%s_%d" % (section, sum(x["name"].startswith(section + "_") for x in PROBES)), "template": t, "context": c or {}})


sec("whitespace")
p("a\n  {% if true %}\n  b\n  {% endif %}\nc")
p("  {{ x }}  \n", {"x": 1})
p("a {%- if true %} b {% endif -%} c")
p("{% for i in [1,2] %}\n{{ i }}\n{% endfor %}")
p("  {#- comment -#}  x")
p("line\n    {# c #}\nnext")
p("  {%+ if true %}x{% endif %}")
p("{% if true +%}\nx{% endif %}")
p("{% raw %}{{ not processed }}{% endraw %}")
p("  {% raw -%}  a {{ b }}  {%- endraw %}  \nz")
p("a\r\nb\rc\n")
p("x\n\n")
p("{{- ' a ' -}}")
p("  x  {{- 'y' }}  z")
p("{% if true %}  \n  text{% endif %}")
p("\t{% if true %}x{% endif %}")
p("{{ '{{' }}{{ {'a': {'b': 1}} }}")
p("text {% if true %}x{% endif %}\n  {% if true %}y{% endif %}")
p("{% if true %}\n\n{% endif %}\n")
p("a  {#- c #}\n  b {# d -#}\n  e")
p("{{ 1 }}\n  {% if true %}\n{% endif %}")
p("{%- if true -%}\n  {{- 'x' -}}\n  {%- endif -%}  \n\n y")
p("\u00a0 {% if true %}x{% endif %}")
p("{% for a in [1,2] %}\n    {{ a }}\n{% endfor %}\n")
p("{% if true %}a{% endif %}  \n{% if true %}b{% endif %}")
p("  {% if true %}a{% endif %}  {% if true %}b{% endif %}\n")
p("{% macro m() -%}\n  body\n{%- endmacro %}\n[{{ m() }}]\n")
p("{% macro m() %}\n  body\n{% endmacro %}\n[{{ m() }}]")
p("<{%- for i in [1,2] -%}\n  {{ i }}\n{%- endfor -%}>")
p("{# one #}{# two #}\n{# three #}\n\nx")
p("  {#- a #}\n  {#+ b #}\n  {# c +#}\ny")
p("{% raw %}\n  {% if %}\n{% endraw %}\n")
p("{%- raw -%}  a  {%- endraw -%}  b")
p("{{ 'a' }}{# c #}{{ 'b' }}\n  {# c #}\n  x")
p("{%- set c = 'x' -%}\n\n{{- c -}}\n\n")

sec("loop")
p("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}")
p("{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}")
p("{% for x in range(5) %}{{ loop.cycle('a','b') }}{% endfor %}")
p("{% for x in range(10) if x is odd %}{{ x }}{{ loop.last }},{% endfor %}")
p("{% for x in [] %}x{% else %}empty{% endfor %}")
p("{% for x in [1] if false %}x{% else %}none-passed{% endfor %}")
p("{% for k in {'b':1,'a':2} %}{{ k }}{% endfor %}{% for k, v in {'b':1,'a':2}.items() %}{{ k }}={{ v }};{% endfor %}")
p("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}")
p("{% for n in tree recursive %}{{ n.name }}{{ loop.depth }}{% if n.children %}({{ loop(n.children) }}){% endif %}{% endfor %}",
  {"tree": [{"name": "a", "children": [{"name": "b"}, {"name": "c", "children": [{"name": "d"}]}]}, {"name": "e"}]})
p("{% for x in [1,1,2,2,1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}")
p("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}")
p("{% for i in [1,2] %}{{ y }}{% set y = i %}{{ y }}{% endfor %}[{{ y }}]")
p("{% set ns = namespace(x=1) %}{% for i in [1,2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}")
p("{% for a, b in [[1,2],[3,4]] %}{{ a }}{{ b }}{% endfor %}")
p("{% for a, b in [[1,2,3]] %}{{ a }}{% endfor %}")
p("{% for (a, b) in [(1, 2)] %}{{ a + b }}{% endfor %}")
p("{% for x in [3,1,2] | sort %}{{ x }}{% endfor %}")
p("{% for x in none %}{% endfor %}")
p("{% for x in 5 %}{% endfor %}")
p("{% for a in [1,2] %}{% for b in [3,4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}")
p("{% for x in items | reverse %}{{ x }}{{ loop.revindex }}{% endfor %}", {"items": [1, 2, 3]})
p("{% for x in items if x > 1 %}{{ loop.length }}{{ loop.revindex }}{% endfor %}", {"items": [1, 2, 3]})
p("{% for i in range(3) %}{% for j in range(3) %}{% if j == 1 %}{% break %}{% endif %}{{ i }}{{ j }} {% endfor %}{% endfor %}")
p("{% for i in range(3) %}{{ i }}{% else %}E{% endfor %}{% for i in [] %}{% else %}{{ loop is defined }}{% endfor %}")
p("{% for m in msgs %}{{ m }}{% endfor %}", {"msgs": "ab"})
p("{% for m in messages %}{% if m.role == 'system' %}{% set sys = m.content %}{% endif %}{% endfor %}[{{ sys }}]",
  {"messages": [{"role": "system", "content": "S"}]})

sec("macro")
p("{% macro f(a, b=2, c='x') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, 3) }}|{{ f(1, c='y') }}")
p("{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, k=4) }}")
p("{% macro wrap(t) %}<{{ t }}>{{ caller() }}</{{ t }}>{% endmacro %}{% call wrap('b') %}inner{% endcall %}")
p("{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(a, b) m() %}{{ a + b }}{% endcall %}")
p("{% macro m() %}{{ g }}{% endmacro %}{% set g = 5 %}{{ m() }}")
p("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}")
p("{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}")
p("{% macro m(a, b=a*2) %}{{ b }}{% endmacro %}{{ m(3) }}")
p("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}")
p("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=2) }}")
p("{% macro m() %}x{% endmacro %}{{ m is callable }}{{ m() ~ m() }}")
p("{% macro outer() %}{% set v = 'in' %}{{ v }}{% endmacro %}{% set v = 'out' %}{{ outer() }}{{ v }}")
p("{% macro m(x) %}{% for i in x %}{{ i }}{% endfor %}{% endmacro %}{% for q in [1] %}{{ m([q, 2]) }}{% endfor %}")
p("{% set ns = namespace(n=0) %}{% macro inc() %}{% set ns.n = ns.n + 1 %}{% endmacro %}{{ inc() }}{{ inc() }}{{ ns.n }}")
p("{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}")
p("{% macro m() %}x{% endmacro %}{% call m() %}y{% endcall %}")

sec("expr")
p("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}")
p("{{ 2 ** 3 ** 2 }} {{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }}")
p("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] * 3 }} {{ [1,2] + [3] }} {{ 3 * 'x' }} {{ 'a' + 'b' ~ 'c' }}")
p("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ true == 1 }} {{ [1,2] < [1,3] }} {{ 'abc' < 'abd' }}")
p("{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} {{ 3 not in [1] }} {{ not 3 in [1] }}")
p("{{ none }} {{ true }} {{ False }} {{ 1.0 }} {{ 1.5e10 }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 123456789012345678 }} {{ 1_000 }} {{ 0x1F }} {{ 2.5e-3 }}")
p("{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}")
p("{{ ('a',) }} {{ (1, 2) }} {{ () }} {{ {'a': 1, 'b': [1, 2]} }}")
p("{{ \"it's\" }} {{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\tnl\\n', '\u00e9\u00a0\u2028'] }}")
p("{{ 'a\\tb\\n' }}|{{ '\\u00e9\\x41\\101' }}|{{ 'a\\qb' }}|{{ 'x' 'y' }}")
p("{{ 'y' if 1 else 'n' }}{{ 'y' if 0 }}|{{ 'a' if false else 'b' if true else 'c' }}")
p("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ not 0 }} {{ '' and 1 }}")
p("{{ 1/3 }} {{ 2.0 * 3 }} {{ 10 / 4 }} {{ 1e300 * 1e10 }} {{ -0.0 }} {{ 100000000000000000000.0 }} {{ 3.0e-7 }} {{ 123456.789e3 }}")
p("{{ \"\\\\\" }} {{ '\\'' }} {{ \"\\\"\" }} {{ 'a\\\nb' }}")
p("{{ 3 // 2.0 }} {{ 'a' * 0 }} {{ [] | join(', ') }} {{ 2 * 2.5 }} {{ 10 % 3.5 }} {{ 1e3 | int }} {{ -0.5 | round }} {{ 0.5 | round }} {{ 1.5 | round }}")
p("{{ 'x' if none else 'y' }} {{ 'x' if [] else 'y' }} {{ 'x' if {} else 'y' }} {{ 'x' if '0' else 'y' }} {{ 'x' if 0.0 else 'y' }}")
p("{{ 1 in [1.0] }} {{ 'a' in ['a', 'b'] }} {{ [1] in [[1]] }} {{ none in [none] }} {{ 'ab' in 'xaby' }}")
p("{{ (1, 2) == [1, 2] }} {{ [1, 2] == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}")
p("{{ 1.0 }} {{ 10.0 / 4 }} {{ 3.14159 }} {{ 2 ** 0.5 }} {{ 1e15 }} {{ 1.5e15 }} {{ 12345678901234567.0 }} {{ 0.0001 }} {{ 0.00001234 }}")
p("{{ 9007199254740993 }} {{ 2 ** 62 }} {{ -2 ** 63 }}")
p("{{ -1 | abs }} {{ - 2 ** 2 }} {{ not true == false }} {{ true and false or 'x' }} {{ 1 if true else 2 if false else 3 }}")
p("{{ 1 == 1 == 1 }} {{ 1 != 2 != 1 }} {{ 2 > 1 >= 1 }} {{ [1, 2, 3][1] ** 2 }}")
p("{{ 1 / 0 }}")
p("{{ 'a' + 1 }}")
p("{{ 1 + 'a' }}")
p("{{ [1] + 'a' }}")
p("{{ 'a' < 1 }}")
p("{{ 'a' - 'b' }}")

sec("access")
p("{{ 'hello'[1] }} {{ 'hello'[-1] }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'hello'[::2] }} {{ [1,2,3,4][1:] }} {{ [1,2,3,4][:-1] }} {{ [1,2,3,4][::-2] }} {{ 'h\u00e9llo'[1] }} {{ 'h\u00e9llo'[::-1] }} {{ [1,2,3][5:] }} {{ 'abc'[-10:2] }}")
p("{{ x.y }} {{ x['y'] }} {{ x.z }}|{{ l[10] }}|{{ l[-1] }}|{{ l.0 }}", {"x": {"y": 1}, "l": [1, 2]})
p("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 5) }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }}", {"d": {"a": 1, "b": 2}})
p("{{ d.missing }}|{{ d.missing is defined }}|{{ d['missing'] }}", {"d": {}})
p("{{ {'a': 1}.a }} {{ {'items': 5}['items'] }} {{ {'items': 5}.items() | list }} {{ {'get': 1}.get('get') }}")
p("{{ 'abc'[1:] ~ 'x' }} {{ ('a', 'b')[0] }} {{ ('a', 'b') | join('-') }}")
p("{{ messages[0].content }}{{ messages[-1]['role'] }}", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
p("{{ messages[5].content }}", {"messages": []})
p("{{ x.__class__ }}|{{ 'a'.__len__ }}|{{ [].__class__ }}|", {"x": "s"})

sec("strmethod")
p("{{ 'abc'.upper() }} {{ ' x '.strip() }} {{ 'xxaxx'.strip('x') }} {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x','c')) }}")
p("{{ 'hello'.replace('l','L') }} {{ 'hello'.replace('l','L',1) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ '-'.join(['a','b']) }} {{ 'a\\nb'.splitlines() }} {{ 'h\u00e9llo'.find('l') }} {{ 'abc'.lstrip('a') }} {{ 'abc'.rstrip('c') }}")
p("{{ '%s-%d-%.2f' | format('a', 3, 2.5) }} {{ '%5s|%-5s|' % ('ab', 'cd') }} {{ '{} {}'.format(1, 'x') }} {{ '{:>5}'.format('a') }} {{ '%s' % 'x' }} {{ '%(a)s' % {'a': 1} }} {{ '%05.1f' % 3.14159 }} {{ '%x' % 255 }}")
p("{{ '\u00df'.upper() }} {{ '\u00c9COLE'.lower() }} {{ '\u00e7a va'.title() }} {{ 'Stra\u00dfe' | upper }} {{ '\u0391\u0392\u0393' | lower }} {{ '\u043f\u0440\u0438\u0432\u0435\u0442' | upper }}")
p("{{ 'Hello World'.split() | map('lower') | join('-') }} {{ 'a=b'.partition('=') }} {{ 'abc'.zfill(5) }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }}|")
p("{{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} {{ 'a1'.isalnum() }} {{ '12'.isdigit() }} {{ ' '.isspace() }} {{ 'Ab'.swapcase() }} {{ 'abc'.index('c') }}")
p("{{ 'x%sy' % 'a' }} {{ '%d%%' % 50 }} {{ '%s and %s' % ('a', 'b') }} {{ '%r' % 'q' }}")
p("{{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='n') }} {{ '{:.2f}'.format(3.14159) }} {{ '{:05d}'.format(42) }} {{ '{{}}'.format() }}")
p("{{ 'abc'.split('b')[0] }} {{ 'Hello World'.lower().split(' ') | join('_') }}")

sec("filter")
p("{{ 'x' | upper }} {{ 'X' | lower }} {{ '  t  ' | trim }} {{ 'xxtxx' | trim('x') }} {{ [1,2,3] | length }} {{ 'h\u00e9llo' | length }} {{ {'a':1} | length }} {{ [3,1,2] | sort }} {{ ['b','A','c'] | sort }} {{ ['b','A','c'] | sort(case_sensitive=true) }} {{ [3,1,2] | sort(reverse=true) }}")
p("{{ [1,2] | first }} {{ [1,2] | last }} {{ [1,2] | join(',') }} {{ [1,2] | join }} {{ 'abc' | list }} {{ 'a' | string }} {{ [1,'a'] | string }} {{ [1,2] | count }}")
p("{{ x | default('d') }} {{ none | default('d') }} {{ '' | default('d', true) }} {{ 0 | d('z', boolean=true) }} {{ x | default }}")
p("{{ [{'n':'a'},{'n':'b'}] | map(attribute='n') | join(',') }} {{ ['a','b'] | map('upper') | list }} {{ [{'n':'a'},{}] | map(attribute='n', default='z') | list }} {{ [[1,2],[3]] | map('length') | list }} {{ ['a-b'] | map('replace', '-', '+') | list }}")
p("{{ range(10) | select('odd') | list }} {{ range(10) | reject('even') | list }} {{ [0,1,'',none,'a'] | select | list }} {{ range(10) | select('divisibleby', 3) | list }} {{ [1,2,3] | select('gt', 1) | list }} {{ ['a','b'] | select('in', ['b']) | list }}")
p("{{ users | selectattr('active') | map(attribute='name') | list }} {{ users | rejectattr('active') | map(attribute='name') | list }} {{ users | selectattr('name', 'equalto', 'b') | list | length }} {{ users | selectattr('x', 'defined') | list }}",
  {"users": [{"name": "a", "active": True}, {"name": "b", "active": False}]})
p("{{ {'b':1,'A':2,'c':0} | dictsort }} {{ {'b':1,'A':2,'c':0} | dictsort(by='value') }} {{ {'b':1,'A':2} | dictsort(true) }} {{ {'b':1,'a':2} | dictsort(reverse=true) }}")
p("{{ {'a':1} | items | list }} {{ [1,2,1,3] | unique | list }} {{ ['a','A','b'] | unique | list }} {{ [1,2,3] | reverse | list }} {{ 'abc' | reverse }}")
p("{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '0x1A' | int(0, 16) }} {{ '3.5' | float }} {{ 'a' | float }} {{ -3 | abs }} {{ ' 12 ' | int }} {{ '1_000' | int }} {{ true | int }}")
p("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }} {{ 5 | round }} {{ 1234 | round(-2) }} {{ 1250 | round(-2) }} {{ 0.125 | round(2) }}")
p("{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ') }}")
p("{{ 'x' | indent(2) }}|{{ '' | indent }}|{{ 'a\\n' | indent(2) }}|{{ 'a\\r\\nb' | indent(1) }}")
p("{{ 'hello wORLD-foo(bar' | title }} {{ 'hello World' | capitalize }} [{{ 'ab' | center(7) }}] {{ 'one two, three' | wordcount }} {{ 'The quick brown fox jumps' | truncate(15) }} {{ 'The quick brown fox' | truncate(10, true) }} {{ 'abc' | truncate(10) }}")
p("{{ range(7) | batch(3) | list }} {{ range(7) | batch(3, 'x') | list }} {{ range(7) | slice(3) | list }} {{ range(7) | slice(3, 0) | list }}")
p("{{ [1,2,3] | sum }} {{ [{'v':1},{'v':2}] | sum(attribute='v') }} {{ [3,1,2] | min }} {{ ['b','A','c'] | max }} {{ [] | max }} {{ [1.5, 2] | sum }}")
p("{{ 'a<b' | e }} {{ '<x>' | safe }} {{ ('<a>' | safe) + '<b>' }} {{ '<b>' + ('<a>' | safe) }} {{ ('<a>' | safe) ~ '<b>' }} {{ 'a&b' | escape | length }}")
p("{{ {'a':1,'b':2} | list }} {{ 'abc' | first }} {{ 'abc' | last }} {{ none | string }} {{ 1.5 | string }} {{ [] | first }}|")
p("{{ 'Hello' | replace('l', 'L') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ users | map(attribute='name') | join(', ') }} {{ users | join(', ', attribute='name') }}", {"users": [{"name": "a"}, {"name": "b"}]})
p("{{ c | selectattr('type', 'equalto', 'text') | map(attribute='text') | join }}", {"c": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]})
p("{{ '  ' | trim == '' }} {{ '\\u3000x\\u3000' | trim }} {{ '\\tx\\n' | trim }}")
p("{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | map(attribute='role') | unique | list }} {{ (messages | last).role }}",
  {"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]})
p("{{ messages | groupby('role') | list }}{% for role, ms in messages | groupby('role') %}{{ role }}{{ ms | length }}{% endfor %}",
  {"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "User"}]})
p("{{ [1,2,3] | map('int') | sum }} {{ ['1','2'] | map('int') | list }} {{ [1,2,3] | max }} {{ [{'a':1},{'a':3}] | max(attribute='a') }}")
p("{{ [3,1] | sort | first }} {{ ['a', 'B'] | sort | join }} {{ [[2,'b'],[1,'a']] | sort | first }} {{ [{'a': 2}, {'a': 1}] | sort(attribute='a') | map(attribute='a') | list }}")
p("{{ x | list }} {{ x | items | list }} {{ x | dictsort }}", {"x": {"k": "v"}})
p("{{ [0.1, 0.2] | sum }} {{ [1, 2.0] | sum }} {{ 0.1 * 3 }} {{ 100.0 }} {{ 1e100 }} {{ -1.5e-7 }}")
p("{{ 'abc' | batch(2) | list }} {{ {'a': 1} | first }} {{ 'x' | center(4) }}|")
p("{% set long = 'a' * 3 %}{{ long | length }}{{ long | truncate(3) }}")

sec("tojson")
p("{{ {'a': [1, 2.5, none, true, '\u00e9\"\\n<>&\\u0001\\u007f']} | tojson }}")
p("{{ {'a': [1, {'b': []}], 'c': {}} | tojson(indent=2) }}")
p("{{ {'a': '\u00e9\U0001F600'} | tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ [1,2] | tojson(separators=(',', ':')) }}")
p("{{ [] | tojson(indent=2) }} {{ {} | tojson(indent=2) }} {{ [[]] | tojson(indent=2) }} {{ 'x' | tojson }} {{ 1.0 | tojson }} {{ {1: 2, true: 3} | tojson }} {{ (1, 2) | tojson }} {{ 1e20 | tojson }}")
p("{{ [1, [2, 3]] | tojson(indent='\\t') }}")
p("{{ x | tojson }}")
p("{{ {'a': none} | tojson }} {{ [none, true, false] | tojson }} {{ '\\u2028' | tojson }} {{ '</script>' | tojson }}")
p("{{ {'z': 1, 'a': {'y': 2, 'b': 1}} | tojson(sort_keys=true, indent=1) }}")
p("{{ '\u00fc' | tojson(ensure_ascii=true) }} {{ 'x' | tojson(indent=2) }} {{ 3 | tojson(indent=2) }} {{ range(3) | list | tojson }}")

sec("test")
p("{{ 1 is number }} {{ true is number }} {{ true is integer }} {{ 1.0 is float }} {{ 'a' is string }} {{ none is none }} {{ x is defined }} {{ y is undefined }} {{ [1] is sequence }} {{ {} is sequence }} {{ 'a' is sequence }} {{ 1 is sequence }} {{ {} is mapping }} {{ [] is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ y is iterable }} {{ y is sequence }}", {"x": 0})
p("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 1 is lt 2 }} {{ 2 is ge 2 }} {{ 'a' is in 'abc' }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ none is sameas none }} {{ true is boolean }} {{ 1 is boolean }} {{ range is callable }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 'nope' is filter }} {{ 1 is not string }} {{ 2 is equalto 2 }}")
p("{{ a is defined and a is not none }}{{ b is not defined or b }}", {"a": None})
p("{% set x = 5 %}{{ x is number and x is integer and x is not float }}{{ y is undefined }}{{ y is none }}{{ none is undefined }}")

sec("set")
p("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}")
p("{% set t %}block {{ 1 + 1 }}{% endset %}[{{ t }}]{% set u | upper %}block{% endset %}{{ u }}")
p("{% filter upper %}abc {{ 'd' }}{% endfilter %}{% filter replace('a', 'b') | upper %}aaa{% endfilter %}")
p("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]")
p("{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }}{{ ns }}{% set ns2 = namespace({'a': 1}, b=2) %}{{ ns2.a }}{{ ns2.b }}{{ ns2.c }}")
p("{% set x = 1 %}{% set x.y = 2 %}")
p("{% set d = dict(a=1, b=2) %}{{ d }}{% set j = joiner('|') %}{% for i in [1,2,3] %}{{ j() }}{{ i }}{% endfor %}")
p("{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}")
p("{% set a = 1 %}{% if true %}{% set a = 2 %}{% endif %}{{ a }}{% for i in [1] %}{% if true %}{% set a = 3 %}{% endif %}{{ a }}{% endfor %}{{ a }}")
p("{% if true %}{% set z = 1 %}{% endif %}{{ z }}{% if x %}{% elif y %}b{% else %}c{% endif %}{% if y %}{% elif 1 %}d{% endif %}")
p("{{ namespace }} {{ (1 if false) is defined }}{{ (1 if false) | default('dd') }}")

sec("undefined")
p("{{ x }}|{{ x is defined }}|{{ x | default('d') }}|{% for a in x %}no{% endfor %}|{{ x | length }}|{{ x ~ 'a' }}|{{ x == x }}|{{ not x }}|{{ x | list }}|{{ x | string }}|{{ x | upper }}|{{ x | trim }}")
p("{{ x.y }}")
p("{{ x + 1 }}")
p("{{ x[0] }}")
p("{{ d.missing.deeper }}", {"d": {}})
p("{{ none.attr }}|{{ [].append }}|")
p("{{ [1].append(2) }}")
p("{% set ns = namespace(l=[]) %}{% set _ = ns.l.append(1) %}{{ ns.l }}")
p("{{ {}.update({}) }}")
p("{{ range(200000) | length }}")

sec("global")
p("{{ raise_exception('boom') }}")
p("{{ strftime_now('%Y-%m-%d %H:%M %A %d %b %Y') }}")
p("{{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }} {{ range(2, 2) | list }}")

CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather.\n  Returns JSON.", "parameters": {"type": "object", "properties": {
    "city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
    "days": {"type": "integer", "description": "Days", "nullable": True}, "tags": {"type": "array", "items": {"type": "string"}},
    "opts": {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}}, "required": ["city"]}}}
CHAT_TOOL2 = {"type": "function", "function": {"name": "noargs", "description": "No args", "parameters": {"type": "object", "properties": {}}}}


def U(c):
    return {"role": "user", "content": c}


def A(c, **kw):
    return dict({"role": "assistant", "content": c}, **kw)


TC = {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "tags": ["a", "\u00e9"], "opts": {"a": True}, "f": 1.5}}}
TC_STR = {"id": "abcdefghi", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}
CONTEXTS = {
    "toolcall": {"messages": [{"role": "system", "content": "Be brief."}, U("Weather in Paris?"), A("", tool_calls=[TC]),
                              {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "{\"temp\": 20}"}, A("It is 20C.")],
                 "tools": [CHAT_TOOL, CHAT_TOOL2], "add_generation_prompt": True},
    "toolcall_str": {"messages": [U("Rome?"), A(None, tool_calls=[TC_STR]), {"role": "tool", "tool_call_id": "abcdefghi", "content": "sunny"},
                                  {"role": "tool", "tool_call_id": "abcdefghi", "content": "warm"}], "tools": [CHAT_TOOL], "add_generation_prompt": True},
    "reasoning": {"messages": [U("2+2?"), A("<think>\nadd them\n</think>\n\n4"), U("and 3+3?"), A("6", reasoning_content="easy")], "add_generation_prompt": False},
    "reasoning_last": {"messages": [U("2+2?"), A("4", reasoning_content="think hard")], "add_generation_prompt": False},
    "thinking_off": {"messages": [U("hi")], "add_generation_prompt": True, "enable_thinking": False},
    "thinking_on": {"messages": [{"role": "system", "content": "  sys with spaces  "}, U("hi")], "add_generation_prompt": True, "enable_thinking": True},
    "parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "look "}, {"type": "image"}, {"type": "text", "text": "here"}]},
                           A([{"type": "text", "text": "ok"}])], "add_generation_prompt": True},
    "assistant_prefill": {"messages": [U("x"), A("partial")], "add_generation_prompt": False},
    "multi_system": {"messages": [{"role": "system", "content": "S1"}, U("a"), A("b"), U("c")], "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"},
    "developer": {"messages": [{"role": "developer", "content": "dev rules"}, U("q")], "add_generation_prompt": True},
}
for c in CONTEXTS.values():
    c.setdefault("bos_token", "<|bos|>")
    c.setdefault("eos_token", "<|eos|>")

out = {"generated_by": "tests/tokenizer/jinja_reference.py with Jinja2 " + jinja2.__version__ +
       " (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols; transformers' tojson, raise_exception, strftime_now at 2026-01-15)",
       "probes": [dict(x, **render(x["template"], x["context"])) for x in PROBES],
       "chat_contexts": CONTEXTS, "chat": []}
for f in sorted(os.listdir(GOLDEN)):
    src = open(os.path.join(GOLDEN, f), encoding="utf-8").read()
    for name, ctx in CONTEXTS.items():
        out["chat"].append(dict({"template": f, "context": name}, **render(src, ctx)))
with open(os.path.join(HERE, "jinja_reference.json"), "w", encoding="utf-8") as fp:
    json.dump(out, fp, ensure_ascii=False, indent=0)
    fp.write("\n")
print(len(out["probes"]), "probes,", len(out["chat"]), "chat renders")
